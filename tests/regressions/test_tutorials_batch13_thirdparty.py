"""Third-party PyTorch code run on Lucid (``import lucid as torch``), thirteenth batch: Ben Trevett's
bentrevett/pytorch-seq2seq (the sentiment-analysis and image-classification repositories are in
``test_tutorials_batch13_thirdparty_classify.py``, cleanrl in ``test_tutorials_batch13_thirdparty_rl*.py``).

- Notebook 1 (stacked ``LSTM`` encoder/decoder, ``init_weights`` with ``nn.init.uniform_(param.data,
  -0.08, 0.08)``, teacher forcing through ``random.random()``, ``CrossEntropyLoss(ignore_index=
  TRG_PAD_IDX)``, ``clip_grad_norm_``) and notebook 2 (``GRU`` with the context vector fed to every
  step, ``nn.init.normal_``); notebook 1's model at its full size on the meta device prints the
  notebook's own lines (``print(model)`` and the parameter count).
- Notebook 3 (bidirectional ``GRU`` encoder, Bahdanau attention with ``self.v =
  nn.Parameter(torch.rand(...))``, ``repeat``, ``bmm``, the ``assert (output == hidden).all()``, its
  printed model) and notebook 4 (``pack_padded_sequence(embedded, src_len.to('cpu'))`` /
  ``pad_packed_sequence``, the attention mask ``masked_fill(mask == 0, -1e10)``, ``translate_sentence``
  returning the attention).
- Notebook 5 (convolutional seq2seq: ``Conv1d``, ``F.glu``, residuals scaled by
  ``torch.sqrt(torch.FloatTensor([0.5]))``, the decoder's causal padding by
  ``torch.zeros(...).fill_(trg_pad_idx)``) and notebook 6 (the Transformer: ``MultiHeadAttentionLayer``,
  ``masked_fill``, ``make_src_mask``/``make_trg_mask`` with ``tril``, ``initialize_weights`` with
  ``xavier_uniform_``).

Multi30k is replaced by a small synthetic corpus (the target is the reversed source, shifted, so the
models have something to learn); torchtext's fields and ``BucketIterator`` by hand-made index lists
(``<unk>``=0, ``<pad>``=1, ``<sos>``=2, ``<eos>``=3, as torchtext numbers them); sizes and epochs are
shrunk (the notebooks' Adam learning rates raised to fit); ``device`` is the default device. The
assertions without PyTorch recompute the cross-entropy with ``ignore_index`` in NumPy, check what the
code promises (a packed batch gives each sentence what it gets alone, padding gets exactly zero
attention, the decoders are causal, masked padding changes nothing, the two attention versions agree)
and require losses to fall by a stated margin; the parity tests run the same text on PyTorch from the
same NumPy-drawn weights with dropout off (the two random streams differ).
"""
import math
import random

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.nn.utils.rnn  # noqa: F401
import lucid.optim  # noqa: F401

UNK, PAD, SOS, EOS = 0, 1, 2, 3
SRC_VOCAB, TRG_VOCAB = 12, 12


def _reference_torch():
    """PyTorch for the parity runs, on one thread (the models are tiny)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _set_params(torch, model, seed, scale=0.2):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.tensor(rng.normal(scale=scale, size=tuple(p.shape)).astype(np.float32)))


def _corpus(n, seed, lo=3, hi=6):
    """Source sentences of words 4..11; the target is the reversed source shifted by 3 (mod 8)."""
    rng = np.random.RandomState(seed)
    pairs = []
    for _ in range(n):
        src = list(rng.randint(4, 12, rng.randint(lo, hi + 1)))
        trg = [(w - 4 + 3) % 8 + 4 for w in src[::-1]]
        pairs.append(([SOS] + src + [EOS], [SOS] + trg + [EOS]))
    return pairs


def _batches(torch, pairs, batch_size, batch_first=False, sort=False):
    """BucketIterator's batches: padded ``[len, batch]`` (or batch-first) tensors with lengths."""
    out = []
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        if sort:  # sort_within_batch = True
            chunk = sorted(chunk, key=lambda p: -len(p[0]))
        S, T = max(len(s) for s, _ in chunk), max(len(t) for _, t in chunk)
        src = np.array([s + [PAD] * (S - len(s)) for s, _ in chunk])
        trg = np.array([t + [PAD] * (T - len(t)) for _, t in chunk])
        if not batch_first:
            src, trg = src.T, trg.T
        out.append((torch.tensor(src.copy()), torch.tensor([len(s) for s, _ in chunk]), torch.tensor(trg.copy())))
    return out


def _ce_ignore_numpy(logits, target, ignore=PAD):
    z = logits.astype(np.float64)
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    keep = target != ignore
    return -logp[np.arange(len(target)), target][keep].mean()


# ----------------------------------------------------- pytorch-seq2seq notebooks 1 and 2 -------------
def seq2seq_rnn_page(torch, kind="lstm", weights_seed=None, dropout=0.5, epochs=4, full_size=False, lr=0.02):
    nn, optim = torch.nn, torch.optim
    device = torch.empty(0).device  # the notebooks: cuda if available else cpu

    if kind == "lstm":  # notebook 1
        class Encoder(nn.Module):
            def __init__(self, input_dim, emb_dim, hid_dim, n_layers, dropout):
                super().__init__()
                self.hid_dim = hid_dim
                self.n_layers = n_layers
                self.embedding = nn.Embedding(input_dim, emb_dim)
                self.rnn = nn.LSTM(emb_dim, hid_dim, n_layers, dropout = dropout)
                self.dropout = nn.Dropout(dropout)

            def forward(self, src):
                embedded = self.dropout(self.embedding(src))
                outputs, (hidden, cell) = self.rnn(embedded)
                return hidden, cell

        class Decoder(nn.Module):
            def __init__(self, output_dim, emb_dim, hid_dim, n_layers, dropout):
                super().__init__()
                self.output_dim = output_dim
                self.hid_dim = hid_dim
                self.n_layers = n_layers
                self.embedding = nn.Embedding(output_dim, emb_dim)
                self.rnn = nn.LSTM(emb_dim, hid_dim, n_layers, dropout = dropout)
                self.fc_out = nn.Linear(hid_dim, output_dim)
                self.dropout = nn.Dropout(dropout)

            def forward(self, input, hidden, cell):
                input = input.unsqueeze(0)
                embedded = self.dropout(self.embedding(input))
                output, (hidden, cell) = self.rnn(embedded, (hidden, cell))
                prediction = self.fc_out(output.squeeze(0))
                return prediction, hidden, cell

        class Seq2Seq(nn.Module):
            def __init__(self, encoder, decoder, device):
                super().__init__()
                self.encoder = encoder
                self.decoder = decoder
                self.device = device
                assert encoder.hid_dim == decoder.hid_dim, \
                    "Hidden dimensions of encoder and decoder must be equal!"
                assert encoder.n_layers == decoder.n_layers, \
                    "Encoder and decoder must have equal number of layers!"

            def forward(self, src, trg, teacher_forcing_ratio = 0.5):
                batch_size = trg.shape[1]
                trg_len = trg.shape[0]
                trg_vocab_size = self.decoder.output_dim
                outputs = torch.zeros(trg_len, batch_size, trg_vocab_size).to(self.device)
                hidden, cell = self.encoder(src)
                input = trg[0,:]
                for t in range(1, trg_len):
                    output, hidden, cell = self.decoder(input, hidden, cell)
                    outputs[t] = output
                    teacher_force = random.random() < teacher_forcing_ratio
                    top1 = output.argmax(1)
                    input = trg[t] if teacher_force else top1
                return outputs

        enc = Encoder(SRC_VOCAB, 8, 16, 2, dropout)
        dec = Decoder(TRG_VOCAB, 8, 16, 2, dropout)

        def init_weights(m):
            for name, param in m.named_parameters():
                nn.init.uniform_(param.data, -0.08, 0.08)
    else:  # notebook 2
        class Encoder(nn.Module):
            def __init__(self, input_dim, emb_dim, hid_dim, dropout):
                super().__init__()
                self.hid_dim = hid_dim
                self.embedding = nn.Embedding(input_dim, emb_dim) #no dropout as only one layer!
                self.rnn = nn.GRU(emb_dim, hid_dim)
                self.dropout = nn.Dropout(dropout)

            def forward(self, src):
                embedded = self.dropout(self.embedding(src))
                outputs, hidden = self.rnn(embedded) #no cell state!
                return hidden

        class Decoder(nn.Module):
            def __init__(self, output_dim, emb_dim, hid_dim, dropout):
                super().__init__()
                self.hid_dim = hid_dim
                self.output_dim = output_dim
                self.embedding = nn.Embedding(output_dim, emb_dim)
                self.rnn = nn.GRU(emb_dim + hid_dim, hid_dim)
                self.fc_out = nn.Linear(emb_dim + hid_dim * 2, output_dim)
                self.dropout = nn.Dropout(dropout)

            def forward(self, input, hidden, context):
                input = input.unsqueeze(0)
                embedded = self.dropout(self.embedding(input))
                emb_con = torch.cat((embedded, context), dim = 2)
                output, hidden = self.rnn(emb_con, hidden)
                output = torch.cat((embedded.squeeze(0), hidden.squeeze(0), context.squeeze(0)),
                                   dim = 1)
                prediction = self.fc_out(output)
                return prediction, hidden

        class Seq2Seq(nn.Module):
            def __init__(self, encoder, decoder, device):
                super().__init__()
                self.encoder = encoder
                self.decoder = decoder
                self.device = device
                assert encoder.hid_dim == decoder.hid_dim, \
                    "Hidden dimensions of encoder and decoder must be equal!"

            def forward(self, src, trg, teacher_forcing_ratio = 0.5):
                batch_size = trg.shape[1]
                trg_len = trg.shape[0]
                trg_vocab_size = self.decoder.output_dim
                outputs = torch.zeros(trg_len, batch_size, trg_vocab_size).to(self.device)
                context = self.encoder(src)
                hidden = context
                input = trg[0,:]
                for t in range(1, trg_len):
                    output, hidden = self.decoder(input, hidden, context)
                    outputs[t] = output
                    teacher_force = random.random() < teacher_forcing_ratio
                    top1 = output.argmax(1)
                    input = trg[t] if teacher_force else top1
                return outputs

        enc = Encoder(SRC_VOCAB, 8, 16, dropout)
        dec = Decoder(TRG_VOCAB, 8, 16, dropout)

        def init_weights(m):
            for name, param in m.named_parameters():
                nn.init.normal_(param.data, mean=0, std=0.01)

    if full_size:  # notebook 1's model at its own size, on the meta device: what its cells print
        INPUT_DIM, OUTPUT_DIM, ENC_EMB_DIM, DEC_EMB_DIM, HID_DIM, N_LAYERS = 7853, 5893, 256, 256, 512, 2
        with torch.device("meta"):
            enc = Encoder(INPUT_DIM, ENC_EMB_DIM, HID_DIM, N_LAYERS, 0.5)
            dec = Decoder(OUTPUT_DIM, DEC_EMB_DIM, HID_DIM, N_LAYERS, 0.5)
            model = Seq2Seq(enc, dec, device)

        def count_parameters(model):
            return sum(p.numel() for p in model.parameters() if p.requires_grad)

        return repr(model.apply(init_weights)) + "\n" + \
            f'The model has {count_parameters(model):,} trainable parameters'
    SEED = 1234
    random.seed(SEED)
    torch.manual_seed(SEED)
    model = Seq2Seq(enc, dec, device).to(device)
    model.apply(init_weights)
    out = {"init": {n: p.detach().cpu().numpy().copy() for n, p in model.named_parameters()}}
    if weights_seed is not None:
        _set_params(torch, model, weights_seed)
    optimizer = optim.Adam(model.parameters(), lr=lr)
    TRG_PAD_IDX = PAD
    criterion = nn.CrossEntropyLoss(ignore_index = TRG_PAD_IDX)

    def train(model, iterator, optimizer, criterion, clip):
        model.train()
        epoch_loss = 0
        for i, (src, _, trg) in enumerate(iterator):
            optimizer.zero_grad()
            output = model(src, trg)
            output_dim = output.shape[-1]
            output = output[1:].view(-1, output_dim)
            trg = trg[1:].view(-1)
            loss = criterion(output, trg)
            if "first" not in out:
                out["first"] = (output.detach().cpu().numpy(), trg.cpu().numpy(), loss.item())
            loss.backward()
            out.setdefault("norms", []).append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
            optimizer.step()
            epoch_loss += loss.item()
        return epoch_loss / len(iterator)

    def evaluate(model, iterator, criterion):
        model.eval()
        epoch_loss = 0
        with torch.no_grad():
            for i, (src, _, trg) in enumerate(iterator):
                output = model(src, trg, 0) #turn off teacher forcing
                output_dim = output.shape[-1]
                output = output[1:].view(-1, output_dim)
                trg = trg[1:].view(-1)
                loss = criterion(output, trg)
                epoch_loss += loss.item()
        return epoch_loss / len(iterator)

    train_iterator = [tuple(t.to(device) for t in b) for b in _batches(torch, _corpus(32, 0), 8)]
    valid_iterator = [tuple(t.to(device) for t in b) for b in _batches(torch, _corpus(16, 1), 8)]
    CLIP = 1
    out["train"], out["valid"] = [], []
    for epoch in range(epochs):
        out["train"].append(train(model, train_iterator, optimizer, criterion, CLIP))
        out["valid"].append(evaluate(model, valid_iterator, criterion))
    out["params"] = [p.detach().cpu().numpy().copy() for p in model.parameters()]
    return out


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_seq2seq_rnn_notebooks(kind):
    out = seq2seq_rnn_page(lucid, kind)
    init = np.concatenate([v.ravel() for v in out["init"].values()])
    if kind == "lstm":  # uniform_(-0.08, 0.08) on every parameter, biases included
        assert np.abs(init).max() <= 0.08 and np.abs(init).max() > 0.079 and abs(init.mean()) < 0.005
    else:  # normal_(0, 0.01)
        assert init.std() == pytest.approx(0.01, rel=0.05) and abs(init.mean()) < 0.001
    logits, trg, loss = out["first"]
    assert (trg == PAD).any() and loss == pytest.approx(_ce_ignore_numpy(logits, trg), rel=1e-5)
    assert len(out["norms"]) == 4 * 4 and max(out["norms"]) > 0
    # from log(12) = 2.48 (the first batch: uniform guesses), four epochs of 4 batches take off
    # >= 0.3 (train) / 0.25 (valid)
    assert loss == pytest.approx(math.log(12), abs=0.01)
    assert out["train"][-1] < out["train"][0] - 0.3 and out["valid"][-1] < out["valid"][0] - 0.25, out["train"]


_NB1_PRINTED = """Seq2Seq(
  (encoder): Encoder(
    (embedding): Embedding(7853, 256)
    (rnn): LSTM(256, 512, num_layers=2, dropout=0.5)
    (dropout): Dropout(p=0.5, inplace=False)
  )
  (decoder): Decoder(
    (embedding): Embedding(5893, 256)
    (rnn): LSTM(256, 512, num_layers=2, dropout=0.5)
    (fc_out): Linear(in_features=512, out_features=5893, bias=True)
    (dropout): Dropout(p=0.5, inplace=False)
  )
)
The model has 13,898,501 trainable parameters"""  # notebook 1's printed cells (outputs 17 and 18)


def test_seq2seq_lstm_full_size_model_prints_as_the_notebook():
    assert seq2seq_rnn_page(lucid, "lstm", full_size=True) == _NB1_PRINTED


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_seq2seq_rnn_notebooks_torch_parity(kind):
    torch = _reference_torch()
    if kind == "lstm":
        assert seq2seq_rnn_page(torch, "lstm", full_size=True) == _NB1_PRINTED
    r = seq2seq_rnn_page(lucid, kind, weights_seed=1, dropout=0.0, epochs=2)
    t = seq2seq_rnn_page(torch, kind, weights_seed=1, dropout=0.0, epochs=2)
    np.testing.assert_allclose(r["train"] + r["valid"] + r["norms"], t["train"] + t["valid"] + t["norms"],
                               rtol=1e-4)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------- pytorch-seq2seq notebooks 3 and 4 -------------
def attention_page(torch, weights_seed=None, dropout=0.5, epochs=3, full_size=False, lr=0.02):
    nn, optim, F = torch.nn, torch.optim, torch.nn.functional
    device = torch.empty(0).device  # the notebooks: cuda if available else cpu

    class Encoder(nn.Module):
        def __init__(self, input_dim, emb_dim, enc_hid_dim, dec_hid_dim, dropout):
            super().__init__()
            self.embedding = nn.Embedding(input_dim, emb_dim)
            self.rnn = nn.GRU(emb_dim, enc_hid_dim, bidirectional = True)
            self.fc = nn.Linear(enc_hid_dim * 2, dec_hid_dim)
            self.dropout = nn.Dropout(dropout)

        def forward(self, src, src_len):
            embedded = self.dropout(self.embedding(src))
            #need to explicitly put lengths on cpu!
            packed_embedded = nn.utils.rnn.pack_padded_sequence(embedded, src_len.to('cpu'))
            packed_outputs, hidden = self.rnn(packed_embedded)
            outputs, _ = nn.utils.rnn.pad_packed_sequence(packed_outputs)
            hidden = torch.tanh(self.fc(torch.cat((hidden[-2,:,:], hidden[-1,:,:]), dim = 1)))
            return outputs, hidden

    class Attention(nn.Module):
        def __init__(self, enc_hid_dim, dec_hid_dim):
            super().__init__()
            self.attn = nn.Linear((enc_hid_dim * 2) + dec_hid_dim, dec_hid_dim)
            self.v = nn.Linear(dec_hid_dim, 1, bias = False)

        def forward(self, hidden, encoder_outputs, mask):
            batch_size = encoder_outputs.shape[1]
            src_len = encoder_outputs.shape[0]
            hidden = hidden.unsqueeze(1).repeat(1, src_len, 1)
            encoder_outputs = encoder_outputs.permute(1, 0, 2)
            energy = torch.tanh(self.attn(torch.cat((hidden, encoder_outputs), dim = 2)))
            attention = self.v(energy).squeeze(2)
            attention = attention.masked_fill(mask == 0, -1e10)
            return F.softmax(attention, dim = 1)

    Nb4Attention = Attention

    class Attention(nn.Module):  # notebook 3's version: v a Parameter, applied with bmm, no mask
        def __init__(self, enc_hid_dim, dec_hid_dim):
            super().__init__()
            self.attn = nn.Linear((enc_hid_dim * 2) + dec_hid_dim, dec_hid_dim)
            self.v = nn.Parameter(torch.rand(dec_hid_dim))

        def forward(self, hidden, encoder_outputs):
            batch_size = encoder_outputs.shape[1]
            src_len = encoder_outputs.shape[0]
            hidden = hidden.unsqueeze(1).repeat(1, src_len, 1)
            encoder_outputs = encoder_outputs.permute(1, 0, 2)
            energy = torch.tanh(self.attn(torch.cat((hidden, encoder_outputs), dim = 2)))
            energy = energy.permute(0, 2, 1)
            v = self.v.repeat(batch_size, 1).unsqueeze(1)
            attention = torch.bmm(v, energy).squeeze(1)
            return F.softmax(attention, dim=1)

    Nb3Attention, Attention = Attention, Nb4Attention

    class Decoder(nn.Module):
        def __init__(self, output_dim, emb_dim, enc_hid_dim, dec_hid_dim, dropout, attention):
            super().__init__()
            self.output_dim = output_dim
            self.attention = attention
            self.embedding = nn.Embedding(output_dim, emb_dim)
            self.rnn = nn.GRU((enc_hid_dim * 2) + emb_dim, dec_hid_dim)
            self.fc_out = nn.Linear((enc_hid_dim * 2) + dec_hid_dim + emb_dim, output_dim)
            self.dropout = nn.Dropout(dropout)

        def forward(self, input, hidden, encoder_outputs, mask):
            input = input.unsqueeze(0)
            embedded = self.dropout(self.embedding(input))
            a = self.attention(hidden, encoder_outputs, mask)
            a = a.unsqueeze(1)
            encoder_outputs = encoder_outputs.permute(1, 0, 2)
            weighted = torch.bmm(a, encoder_outputs)
            weighted = weighted.permute(1, 0, 2)
            rnn_input = torch.cat((embedded, weighted), dim = 2)
            output, hidden = self.rnn(rnn_input, hidden.unsqueeze(0))
            assert (output == hidden).all()
            embedded = embedded.squeeze(0)
            output = output.squeeze(0)
            weighted = weighted.squeeze(0)
            prediction = self.fc_out(torch.cat((output, weighted, embedded), dim = 1))
            return prediction, hidden.squeeze(0), a.squeeze(1)

    class Seq2Seq(nn.Module):
        def __init__(self, encoder, decoder, src_pad_idx, device):
            super().__init__()
            self.encoder = encoder
            self.decoder = decoder
            self.src_pad_idx = src_pad_idx
            self.device = device

        def create_mask(self, src):
            mask = (src != self.src_pad_idx).permute(1, 0)
            return mask

        def forward(self, src, src_len, trg, teacher_forcing_ratio = 0.5):
            batch_size = src.shape[1]
            trg_len = trg.shape[0]
            trg_vocab_size = self.decoder.output_dim
            outputs = torch.zeros(trg_len, batch_size, trg_vocab_size).to(self.device)
            encoder_outputs, hidden = self.encoder(src, src_len)
            input = trg[0,:]
            mask = self.create_mask(src)
            for t in range(1, trg_len):
                output, hidden, _ = self.decoder(input, hidden, encoder_outputs, mask)
                outputs[t] = output
                teacher_force = random.random() < teacher_forcing_ratio
                top1 = output.argmax(1)
                input = trg[t] if teacher_force else top1
            return outputs

    random.seed(1234)
    torch.manual_seed(1234)
    attn = Attention(8, 8)
    enc = Encoder(SRC_VOCAB, 6, 8, 8, dropout)
    dec = Decoder(TRG_VOCAB, 6, 8, 8, dropout, attn)
    SRC_PAD_IDX = PAD
    model = Seq2Seq(enc, dec, SRC_PAD_IDX, device).to(device)

    def init_weights(m):
        for name, param in m.named_parameters():
            if 'weight' in name:
                nn.init.normal_(param.data, mean=0, std=0.01)
            else:
                nn.init.constant_(param.data, 0)

    if full_size:  # notebook 3's model at its own size, on the meta device: what its cells print
        INPUT_DIM, OUTPUT_DIM, ENC_EMB_DIM, DEC_EMB_DIM, ENC_HID_DIM, DEC_HID_DIM = 7855, 5893, 256, 256, 512, 512
        with torch.device("meta"):
            attn = Nb3Attention(ENC_HID_DIM, DEC_HID_DIM)
            enc = Encoder(INPUT_DIM, ENC_EMB_DIM, ENC_HID_DIM, DEC_HID_DIM, 0.5)
            dec = Decoder(OUTPUT_DIM, DEC_EMB_DIM, ENC_HID_DIM, DEC_HID_DIM, 0.5, attn)
            model = Seq2Seq(enc, dec, SRC_PAD_IDX, device)
        printed = repr(model.apply(init_weights))

        def count_parameters(model):
            return sum(p.numel() for p in model.parameters() if p.requires_grad)

        return printed + "\n" + f'The model has {count_parameters(model):,} trainable parameters'
    model.apply(init_weights)
    _set_params(torch, model, 7 if weights_seed is None else weights_seed, scale=0.3)
    out = {}

    # invariances, before training (eval mode: no dropout)
    model.eval()
    (src, src_len, trg), = _batches(torch, _corpus(4, 5, 2, 6), 4, sort=True)
    src, trg = src.to(device), trg.to(device)
    with torch.no_grad():
        enc_out, hid = model.encoder(src, src_len)
        alone = [model.encoder(src[:n, i:i + 1], src_len[i:i + 1]) for i, n in enumerate(src_len.tolist())]
        mask = model.create_mask(src)
        a = model.decoder.attention(hid, enc_out, mask)
        nb3 = Nb3Attention(8, 8).to(device)
        nb3.attn.load_state_dict(model.decoder.attention.attn.state_dict())
        nb3.v.copy_(model.decoder.attention.v.weight[0])
        n0 = src_len[0].item()  # the longest sentence has no padding: nb3's attention must agree
        a3 = nb3(hid[:1], enc_out[:n0, :1])
    out["packed"] = dict(outputs=enc_out.cpu().numpy(), hidden=hid.cpu().numpy(), lengths=src_len.tolist(),
                         alone=[(o.cpu().numpy(), h.cpu().numpy()) for o, h in alone], attention=a.cpu().numpy(),
                         mask=mask.cpu().numpy(), nb3=a3.cpu().numpy())

    optimizer = optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss(ignore_index = PAD)
    train_iterator = [tuple(t.to(device) if k != 1 else t for k, t in enumerate(b))
                      for b in _batches(torch, _corpus(32, 0), 8, sort=True)]
    losses = []
    for epoch in range(epochs):
        model.train()
        epoch_loss = 0
        for i, (src, src_len, trg) in enumerate(train_iterator):
            optimizer.zero_grad()
            output = model(src, src_len, trg)
            output_dim = output.shape[-1]
            output = output[1:].view(-1, output_dim)
            trg = trg[1:].view(-1)
            loss = criterion(output, trg)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1)
            optimizer.step()
            epoch_loss += loss.item()
        losses.append(epoch_loss / len(train_iterator))
    out["losses"] = losses

    def translate_sentence(src_indexes, model, device, max_len = 50):
        model.eval()
        src_tensor = torch.LongTensor(src_indexes).unsqueeze(1).to(device)
        src_len = torch.LongTensor([len(src_indexes)])
        with torch.no_grad():
            encoder_outputs, hidden = model.encoder(src_tensor, src_len)
        mask = model.create_mask(src_tensor)
        trg_indexes = [SOS]
        attentions = torch.zeros(max_len, 1, len(src_indexes)).to(device)
        for i in range(max_len):
            trg_tensor = torch.LongTensor([trg_indexes[-1]]).to(device)
            with torch.no_grad():
                output, hidden, attention = model.decoder(trg_tensor, hidden, encoder_outputs, mask)
            attentions[i] = attention
            pred_token = output.argmax(1).item()
            trg_indexes.append(pred_token)
            if pred_token == EOS:
                break
        return trg_indexes[1:], attentions[:len(trg_indexes)-1]

    tokens, attentions = translate_sentence(_corpus(1, 9)[0][0], model, device, max_len=8)
    out["translation"] = (tokens, attentions.cpu().numpy())
    out["params"] = [p.detach().cpu().numpy().copy() for p in model.parameters()]
    return out


def test_seq2seq_attention_packed_padded_masking():
    out = attention_page(lucid)
    pk = out["packed"]
    lengths = pk["lengths"]
    assert lengths == sorted(lengths, reverse=True) and lengths[-1] < lengths[0]
    for i, n in enumerate(lengths):
        o, h = pk["alone"][i]  # each sentence through the encoder alone, without padding
        np.testing.assert_allclose(pk["outputs"][:n, i], o[:, 0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(pk["hidden"][i], h[0], rtol=1e-5, atol=1e-6)
        assert (pk["outputs"][n:, i] == 0).all()  # pad_packed_sequence pads with zeros
    assert (pk["mask"] == (np.arange(lengths[0])[None] < np.array(lengths)[:, None])).all()
    assert (pk["attention"][~pk["mask"]] == 0).all()  # masked_fill(-1e10) then softmax: exactly 0
    np.testing.assert_allclose(pk["attention"].sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(pk["nb3"][0], pk["attention"][0], rtol=1e-5, atol=1e-7)
    assert out["losses"][-1] < out["losses"][0] - 0.3, out["losses"]
    tokens, att = out["translation"]
    assert 1 <= len(tokens) <= 8 and att.shape == (len(tokens), 1, len(_corpus(1, 9)[0][0]))
    np.testing.assert_allclose(att.sum(-1), 1.0, rtol=1e-5)


_NB3_PRINTED = """Seq2Seq(
  (encoder): Encoder(
    (embedding): Embedding(7855, 256)
    (rnn): GRU(256, 512, bidirectional=True)
    (fc): Linear(in_features=1024, out_features=512, bias=True)
    (dropout): Dropout(p=0.5, inplace=False)
  )
  (decoder): Decoder(
    (attention): Attention(
      (attn): Linear(in_features=1536, out_features=512, bias=True)
    )
    (embedding): Embedding(5893, 256)
    (rnn): GRU(1280, 512)
    (fc_out): Linear(in_features=1792, out_features=5893, bias=True)
    (dropout): Dropout(p=0.5, inplace=False)
  )
)
The model has 20,518,917 trainable parameters"""  # notebook 3's printed cells (outputs 15 and 16)


def test_seq2seq_attention_full_size_model_prints_as_the_notebook():
    assert attention_page(lucid, full_size=True) == _NB3_PRINTED


def test_seq2seq_attention_packed_padded_masking_torch_parity():
    torch = _reference_torch()
    assert attention_page(torch, full_size=True) == _NB3_PRINTED
    r, t = attention_page(lucid, weights_seed=3, dropout=0.0, epochs=2), attention_page(torch, weights_seed=3,
                                                                                       dropout=0.0, epochs=2)
    for k in ("outputs", "hidden", "attention", "nb3"):
        np.testing.assert_allclose(r["packed"][k], t["packed"][k], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4)
    assert r["translation"][0] == t["translation"][0]
    np.testing.assert_allclose(r["translation"][1], t["translation"][1], rtol=1e-4, atol=1e-6)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------- pytorch-seq2seq notebook 5 (ConvS2S) ----------
def conv_seq2seq_page(torch, weights_seed=None, dropout=0.25, epochs=4):
    nn, optim, F = torch.nn, torch.optim, torch.nn.functional
    device = torch.empty(0).device  # the notebook: cuda if available else cpu

    class Encoder(nn.Module):
        def __init__(self, input_dim, emb_dim, hid_dim, n_layers, kernel_size, dropout, device, max_length = 100):
            super().__init__()
            assert kernel_size % 2 == 1, "Kernel size must be odd!"
            self.device = device
            self.scale = torch.sqrt(torch.FloatTensor([0.5])).to(device)
            self.tok_embedding = nn.Embedding(input_dim, emb_dim)
            self.pos_embedding = nn.Embedding(max_length, emb_dim)
            self.emb2hid = nn.Linear(emb_dim, hid_dim)
            self.hid2emb = nn.Linear(hid_dim, emb_dim)
            self.convs = nn.ModuleList([nn.Conv1d(in_channels = hid_dim,
                                                  out_channels = 2 * hid_dim,
                                                  kernel_size = kernel_size,
                                                  padding = (kernel_size - 1) // 2)
                                        for _ in range(n_layers)])
            self.dropout = nn.Dropout(dropout)

        def forward(self, src):
            batch_size = src.shape[0]
            src_len = src.shape[1]
            pos = torch.arange(0, src_len).unsqueeze(0).repeat(batch_size, 1).to(self.device)
            tok_embedded = self.tok_embedding(src)
            pos_embedded = self.pos_embedding(pos)
            embedded = self.dropout(tok_embedded + pos_embedded)
            conv_input = self.emb2hid(embedded)
            conv_input = conv_input.permute(0, 2, 1)
            for i, conv in enumerate(self.convs):
                conved = conv(self.dropout(conv_input))
                conved = F.glu(conved, dim = 1)
                conved = (conved + conv_input) * self.scale
                conv_input = conved
            conved = self.hid2emb(conved.permute(0, 2, 1))
            combined = (conved + embedded) * self.scale
            return conved, combined

    class Decoder(nn.Module):
        def __init__(self, output_dim, emb_dim, hid_dim, n_layers, kernel_size, dropout, trg_pad_idx, device,
                     max_length = 100):
            super().__init__()
            self.kernel_size = kernel_size
            self.trg_pad_idx = trg_pad_idx
            self.device = device
            self.scale = torch.sqrt(torch.FloatTensor([0.5])).to(device)
            self.tok_embedding = nn.Embedding(output_dim, emb_dim)
            self.pos_embedding = nn.Embedding(max_length, emb_dim)
            self.emb2hid = nn.Linear(emb_dim, hid_dim)
            self.hid2emb = nn.Linear(hid_dim, emb_dim)
            self.attn_hid2emb = nn.Linear(hid_dim, emb_dim)
            self.attn_emb2hid = nn.Linear(emb_dim, hid_dim)
            self.fc_out = nn.Linear(emb_dim, output_dim)
            self.convs = nn.ModuleList([nn.Conv1d(in_channels = hid_dim,
                                                  out_channels = 2 * hid_dim,
                                                  kernel_size = kernel_size)
                                        for _ in range(n_layers)])
            self.dropout = nn.Dropout(dropout)

        def calculate_attention(self, embedded, conved, encoder_conved, encoder_combined):
            conved_emb = self.attn_hid2emb(conved.permute(0, 2, 1))
            combined = (conved_emb + embedded) * self.scale
            energy = torch.matmul(combined, encoder_conved.permute(0, 2, 1))
            attention = F.softmax(energy, dim=2)
            attended_encoding = torch.matmul(attention, encoder_combined)
            attended_encoding = self.attn_emb2hid(attended_encoding)
            attended_combined = (conved + attended_encoding.permute(0, 2, 1)) * self.scale
            return attention, attended_combined

        def forward(self, trg, encoder_conved, encoder_combined):
            batch_size = trg.shape[0]
            trg_len = trg.shape[1]
            pos = torch.arange(0, trg_len).unsqueeze(0).repeat(batch_size, 1).to(self.device)
            tok_embedded = self.tok_embedding(trg)
            pos_embedded = self.pos_embedding(pos)
            embedded = self.dropout(tok_embedded + pos_embedded)
            conv_input = self.emb2hid(embedded)
            conv_input = conv_input.permute(0, 2, 1)
            batch_size = conv_input.shape[0]
            hid_dim = conv_input.shape[1]
            for i, conv in enumerate(self.convs):
                conv_input = self.dropout(conv_input)
                padding = torch.zeros(batch_size,
                                      hid_dim,
                                      self.kernel_size - 1).fill_(self.trg_pad_idx).to(self.device)
                padded_conv_input = torch.cat((padding, conv_input), dim = 2)
                conved = conv(padded_conv_input)
                conved = F.glu(conved, dim = 1)
                attention, conved = self.calculate_attention(embedded, conved, encoder_conved, encoder_combined)
                conved = (conved + conv_input) * self.scale
                conv_input = conved
            conved = self.hid2emb(conved.permute(0, 2, 1))
            output = self.fc_out(self.dropout(conved))
            return output, attention

    class Seq2Seq(nn.Module):
        def __init__(self, encoder, decoder):
            super().__init__()
            self.encoder = encoder
            self.decoder = decoder

        def forward(self, src, trg):
            encoder_conved, encoder_combined = self.encoder(src)
            output, attention = self.decoder(trg, encoder_conved, encoder_combined)
            return output, attention

    torch.manual_seed(1234)
    enc = Encoder(SRC_VOCAB, 8, 16, 2, 3, dropout, device, max_length=12)
    dec = Decoder(TRG_VOCAB, 8, 16, 2, 3, dropout, PAD, device, max_length=12)
    model = Seq2Seq(enc, dec).to(device)
    if weights_seed is not None:
        _set_params(torch, model, weights_seed)
    out = {}
    model.eval()
    (src, _, trg), = _batches(torch, _corpus(3, 4), 3, batch_first=True)
    src, trg = src.to(device), trg.to(device)
    trg2 = trg.clone()
    trg2[:, 4:] = 5  # a different future from position 4 on
    with torch.no_grad():
        out["causal"] = (model(src, trg)[0].cpu().numpy(), model(src, trg2)[0].cpu().numpy())
        out["attention"] = model(src, trg)[1].cpu().numpy()

    optimizer = optim.Adam(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss(ignore_index = PAD)
    train_iterator = [tuple(t.to(device) for t in b) for b in _batches(torch, _corpus(32, 0), 8, batch_first=True)]
    out["losses"] = []
    for epoch in range(epochs):
        model.train()
        epoch_loss = 0
        for i, (src, _, trg) in enumerate(train_iterator):
            optimizer.zero_grad()
            output, _ = model(src, trg[:,:-1])
            output_dim = output.shape[-1]
            output = output.contiguous().view(-1, output_dim)
            trg = trg[:,1:].contiguous().view(-1)
            loss = criterion(output, trg)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            epoch_loss += loss.item()
        out["losses"].append(epoch_loss / len(train_iterator))
    out["params"] = [p.detach().cpu().numpy().copy() for p in model.parameters()]
    return out


def test_seq2seq_convolutional():
    out = conv_seq2seq_page(lucid)
    a, b = out["causal"]
    np.testing.assert_array_equal(a[:, :4], b[:, :4])  # the decoder's left padding makes it causal
    assert np.abs(a[:, 4:] - b[:, 4:]).max() > 1e-3
    np.testing.assert_allclose(out["attention"].sum(-1), 1.0, rtol=1e-5)
    assert out["losses"][-1] < out["losses"][0] - 0.25, out["losses"]


def test_seq2seq_convolutional_torch_parity():
    torch = _reference_torch()
    r, t = conv_seq2seq_page(lucid, 2, 0.0, 2), conv_seq2seq_page(torch, 2, 0.0, 2)
    for x, y in zip(r["causal"] + (r["attention"],), t["causal"] + (t["attention"],)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------- pytorch-seq2seq notebook 6 (Transformer) -------
def transformer_page(torch, weights_seed=None, dropout=0.1, epochs=4):
    nn, optim = torch.nn, torch.optim
    device = torch.empty(0).device  # the notebook: cuda if available else cpu

    class Encoder(nn.Module):
        def __init__(self, input_dim, hid_dim, n_layers, n_heads, pf_dim, dropout, device, max_length = 100):
            super().__init__()
            self.device = device
            self.tok_embedding = nn.Embedding(input_dim, hid_dim)
            self.pos_embedding = nn.Embedding(max_length, hid_dim)
            self.layers = nn.ModuleList([EncoderLayer(hid_dim, n_heads, pf_dim, dropout, device)
                                         for _ in range(n_layers)])
            self.dropout = nn.Dropout(dropout)
            self.scale = torch.sqrt(torch.FloatTensor([hid_dim])).to(device)

        def forward(self, src, src_mask):
            batch_size = src.shape[0]
            src_len = src.shape[1]
            pos = torch.arange(0, src_len).unsqueeze(0).repeat(batch_size, 1).to(self.device)
            src = self.dropout((self.tok_embedding(src) * self.scale) + self.pos_embedding(pos))
            for layer in self.layers:
                src = layer(src, src_mask)
            return src

    class EncoderLayer(nn.Module):
        def __init__(self, hid_dim, n_heads, pf_dim, dropout, device):
            super().__init__()
            self.self_attn_layer_norm = nn.LayerNorm(hid_dim)
            self.ff_layer_norm = nn.LayerNorm(hid_dim)
            self.self_attention = MultiHeadAttentionLayer(hid_dim, n_heads, dropout, device)
            self.positionwise_feedforward = PositionwiseFeedforwardLayer(hid_dim, pf_dim, dropout)
            self.dropout = nn.Dropout(dropout)

        def forward(self, src, src_mask):
            _src, _ = self.self_attention(src, src, src, src_mask)
            src = self.self_attn_layer_norm(src + self.dropout(_src))
            _src = self.positionwise_feedforward(src)
            src = self.ff_layer_norm(src + self.dropout(_src))
            return src

    class MultiHeadAttentionLayer(nn.Module):
        def __init__(self, hid_dim, n_heads, dropout, device):
            super().__init__()
            assert hid_dim % n_heads == 0
            self.hid_dim = hid_dim
            self.n_heads = n_heads
            self.head_dim = hid_dim // n_heads
            self.fc_q = nn.Linear(hid_dim, hid_dim)
            self.fc_k = nn.Linear(hid_dim, hid_dim)
            self.fc_v = nn.Linear(hid_dim, hid_dim)
            self.fc_o = nn.Linear(hid_dim, hid_dim)
            self.dropout = nn.Dropout(dropout)
            self.scale = torch.sqrt(torch.FloatTensor([self.head_dim])).to(device)

        def forward(self, query, key, value, mask = None):
            batch_size = query.shape[0]
            Q = self.fc_q(query)
            K = self.fc_k(key)
            V = self.fc_v(value)
            Q = Q.view(batch_size, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
            K = K.view(batch_size, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
            V = V.view(batch_size, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
            energy = torch.matmul(Q, K.permute(0, 1, 3, 2)) / self.scale
            if mask is not None:
                energy = energy.masked_fill(mask == 0, -1e10)
            attention = torch.softmax(energy, dim = -1)
            x = torch.matmul(self.dropout(attention), V)
            x = x.permute(0, 2, 1, 3).contiguous()
            x = x.view(batch_size, -1, self.hid_dim)
            x = self.fc_o(x)
            return x, attention

    class PositionwiseFeedforwardLayer(nn.Module):
        def __init__(self, hid_dim, pf_dim, dropout):
            super().__init__()
            self.fc_1 = nn.Linear(hid_dim, pf_dim)
            self.fc_2 = nn.Linear(pf_dim, hid_dim)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            x = self.dropout(torch.relu(self.fc_1(x)))
            x = self.fc_2(x)
            return x

    class Decoder(nn.Module):
        def __init__(self, output_dim, hid_dim, n_layers, n_heads, pf_dim, dropout, device, max_length = 100):
            super().__init__()
            self.device = device
            self.tok_embedding = nn.Embedding(output_dim, hid_dim)
            self.pos_embedding = nn.Embedding(max_length, hid_dim)
            self.layers = nn.ModuleList([DecoderLayer(hid_dim, n_heads, pf_dim, dropout, device)
                                         for _ in range(n_layers)])
            self.fc_out = nn.Linear(hid_dim, output_dim)
            self.dropout = nn.Dropout(dropout)
            self.scale = torch.sqrt(torch.FloatTensor([hid_dim])).to(device)

        def forward(self, trg, enc_src, trg_mask, src_mask):
            batch_size = trg.shape[0]
            trg_len = trg.shape[1]
            pos = torch.arange(0, trg_len).unsqueeze(0).repeat(batch_size, 1).to(self.device)
            trg = self.dropout((self.tok_embedding(trg) * self.scale) + self.pos_embedding(pos))
            for layer in self.layers:
                trg, attention = layer(trg, enc_src, trg_mask, src_mask)
            output = self.fc_out(trg)
            return output, attention

    class DecoderLayer(nn.Module):
        def __init__(self, hid_dim, n_heads, pf_dim, dropout, device):
            super().__init__()
            self.self_attn_layer_norm = nn.LayerNorm(hid_dim)
            self.enc_attn_layer_norm = nn.LayerNorm(hid_dim)
            self.ff_layer_norm = nn.LayerNorm(hid_dim)
            self.self_attention = MultiHeadAttentionLayer(hid_dim, n_heads, dropout, device)
            self.encoder_attention = MultiHeadAttentionLayer(hid_dim, n_heads, dropout, device)
            self.positionwise_feedforward = PositionwiseFeedforwardLayer(hid_dim, pf_dim, dropout)
            self.dropout = nn.Dropout(dropout)

        def forward(self, trg, enc_src, trg_mask, src_mask):
            _trg, _ = self.self_attention(trg, trg, trg, trg_mask)
            trg = self.self_attn_layer_norm(trg + self.dropout(_trg))
            _trg, attention = self.encoder_attention(trg, enc_src, enc_src, src_mask)
            trg = self.enc_attn_layer_norm(trg + self.dropout(_trg))
            _trg = self.positionwise_feedforward(trg)
            trg = self.ff_layer_norm(trg + self.dropout(_trg))
            return trg, attention

    class Seq2Seq(nn.Module):
        def __init__(self, encoder, decoder, src_pad_idx, trg_pad_idx, device):
            super().__init__()
            self.encoder = encoder
            self.decoder = decoder
            self.src_pad_idx = src_pad_idx
            self.trg_pad_idx = trg_pad_idx
            self.device = device

        def make_src_mask(self, src):
            src_mask = (src != self.src_pad_idx).unsqueeze(1).unsqueeze(2)
            return src_mask

        def make_trg_mask(self, trg):
            trg_pad_mask = (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(2)
            trg_len = trg.shape[1]
            trg_sub_mask = torch.tril(torch.ones((trg_len, trg_len), device = self.device)).bool()
            trg_mask = trg_pad_mask & trg_sub_mask
            return trg_mask

        def forward(self, src, trg):
            src_mask = self.make_src_mask(src)
            trg_mask = self.make_trg_mask(trg)
            enc_src = self.encoder(src, src_mask)
            output, attention = self.decoder(trg, enc_src, trg_mask, src_mask)
            return output, attention

    torch.manual_seed(1234)
    enc = Encoder(SRC_VOCAB, 16, 2, 2, 32, dropout, device, max_length=12)
    dec = Decoder(TRG_VOCAB, 16, 2, 2, 32, dropout, device, max_length=12)
    model = Seq2Seq(enc, dec, PAD, PAD, device).to(device)

    def initialize_weights(m):
        if hasattr(m, 'weight') and m.weight.dim() > 1:
            nn.init.xavier_uniform_(m.weight.data)

    model.apply(initialize_weights)
    out = {"fc_q": model.encoder.layers[0].self_attention.fc_q.weight.detach().cpu().numpy().copy()}
    if weights_seed is not None:
        _set_params(torch, model, weights_seed, scale=0.3)
    model.eval()
    (src, _, trg), = _batches(torch, _corpus(3, 4), 3, batch_first=True)
    src, trg = src.to(device), trg.to(device)
    trg2 = trg.clone()
    trg2[:, 4:] = 5
    src_padded = torch.cat([src, torch.full((3, 2), PAD, dtype=src.dtype, device=device)], 1)
    with torch.no_grad():
        o1, att = model(src, trg)
        out["causal"] = (o1.cpu().numpy(), model(src, trg2)[0].cpu().numpy())
        out["pad_invariant"] = model(src_padded, trg)[0].cpu().numpy()
        out["attention"], out["trg_mask"] = att.cpu().numpy(), model.make_trg_mask(trg).cpu().numpy()
        out["src"], out["trg"] = src.cpu().numpy(), trg.cpu().numpy()

    LEARNING_RATE = 0.0005 * 10
    optimizer = torch.optim.Adam(model.parameters(), lr = LEARNING_RATE)
    criterion = nn.CrossEntropyLoss(ignore_index = PAD)
    train_iterator = [tuple(t.to(device) for t in b) for b in _batches(torch, _corpus(32, 0), 8, batch_first=True)]
    out["losses"] = []
    for epoch in range(epochs):
        model.train()
        epoch_loss = 0
        for i, (src, _, trg) in enumerate(train_iterator):
            optimizer.zero_grad()
            output, _ = model(src, trg[:,:-1])
            output_dim = output.shape[-1]
            output = output.contiguous().view(-1, output_dim)
            trg = trg[:,1:].contiguous().view(-1)
            loss = criterion(output, trg)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1)
            optimizer.step()
            epoch_loss += loss.item()
        out["losses"].append(epoch_loss / len(train_iterator))
    out["params"] = [p.detach().cpu().numpy().copy() for p in model.parameters()]
    return out


def test_seq2seq_transformer():
    out = transformer_page(lucid)
    bound = math.sqrt(6 / (16 + 16))  # xavier_uniform_ on the 16x16 projections
    assert np.abs(out["fc_q"]).max() <= bound and np.abs(out["fc_q"]).max() > 0.9 * bound
    a, b = out["causal"]
    np.testing.assert_allclose(a[:, :4], b[:, :4], rtol=1e-5, atol=1e-6)  # tril mask: causal
    assert np.abs(a[:, 4:] - b[:, 4:]).max() > 1e-3
    np.testing.assert_allclose(out["pad_invariant"], a, rtol=1e-5, atol=1e-5)  # masked padding is inert
    src_len = (out["src"] != PAD).sum(1)
    for i, n in enumerate(src_len):  # encoder attention: exactly zero on padded source positions
        assert (out["attention"][i, :, :, n:] == 0).all() and (out["attention"][i, :, :, :n] > 0).all()
    trg_ok = out["trg"] != PAD
    want = trg_ok[:, None, None, :] & np.tril(np.ones((a.shape[1],) * 2, bool))
    assert (out["trg_mask"] == want).all()
    assert out["losses"][-1] < out["losses"][0] - 0.5, out["losses"]


def test_seq2seq_transformer_torch_parity():
    torch = _reference_torch()
    r, t = transformer_page(lucid, 2, 0.0, 2), transformer_page(torch, 2, 0.0, 2)
    for k in ("pad_invariant", "attention"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["causal"][1], t["causal"][1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4)
    # fc_k's bias has a zero gradient in exact arithmetic (softmax ignores a shift shared by all keys):
    # Adam turns its rounding noise into lr-sized steps, so the weights are compared more loosely
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=3e-4)
