"""PyTorch tutorials run on Lucid (``import lucid as torch``), ninth batch, sequence-to-sequence
pages: "Language Translation with nn.Transformer and torchtext" (``Seq2SeqTransformer`` over
``nn.Transformer`` with ``TokenEmbedding``/``PositionalEncoding``, ``generate_square_subsequent_mask``,
``create_mask`` with padding masks, ``pad_sequence`` collation, ``CrossEntropyLoss(ignore_index)``,
``greedy_decode`` through ``transformer.encoder``/``decoder``) and the "Chatbot Tutorial" (the
``Voc`` vocabulary, ``zeroPadding``/``binaryMatrix``/``batch2TrainData``, a bidirectional GRU
encoder over ``pack_padded_sequence``/``pad_packed_sequence``, Luong attention with the ``dot``,
``general`` and ``concat`` scores, ``maskNLLLoss`` through ``gather``/``masked_select``, teacher
forcing and greedy feeding, ``clip_grad_norm_``, the checkpoint dict, ``GreedySearchDecoder``).

Multi30k and the Cornell movie dialogs are replaced by small synthetic corpora (the target is a
word-for-word function of the source, so the models have something to learn); torchtext/spacy
tokenizers by ``str.split``; models and epochs are shrunk. Each page is a function of the module it
is handed as ``torch``; the parity tests run the same text on PyTorch where installed, from the
same NumPy-drawn weights with dropout off (the two random streams differ).
"""
import itertools
import random

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.nn.utils.rnn  # noqa: F401
import lucid.optim  # noqa: F401


def _reference_torch():
    """PyTorch for the parity runs, on one thread: these models are tiny, and PyTorch's thread pool
    only contends with the other processes on a shared machine (ten times slower there)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _set_params(torch, model, seed, scale=0.2, norms_at_one=False):
    """NumPy-drawn weights: the same start on both libraries (``norms_at_one`` keeps LayerNorm scales
    near one and biases near zero, as their initialisation does)."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            value = rng.normal(scale=scale, size=tuple(p.shape))
            if norms_at_one and p.dim() == 1:
                value = value * 0.1 + (1.0 if "norm" in name and name.endswith("weight") else 0.0)
            p.copy_(torch.tensor(value, dtype=p.dtype))
    return model


# ------------------------------------------------------------------ Language Translation with nn.Transformer

def _translation_corpus(n, seed):
    """German-like source sentences of 3-6 words and their word-for-word "English"."""
    rng = np.random.default_rng(seed)
    de = [f"w{i}" for i in range(12)]
    pairs = []
    for _ in range(n):
        words = list(rng.choice(de, size=int(rng.integers(3, 7))))
        pairs.append((" ".join(words), " ".join("e" + w[1:] for w in words)))
    return pairs


class _Vocab:
    """What the page uses of torchtext's ``Vocab``: ``__call__`` on tokens, ``lookup_tokens``, ``len``."""

    def __init__(self, tokens, specials):
        self.itos = list(specials) + sorted(set(tokens) - set(specials))
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    def __call__(self, tokens):
        return [self.stoi.get(t, 0) for t in tokens]

    def __len__(self):
        return len(self.itos)

    def lookup_tokens(self, ids):
        return [self.itos[int(i)] for i in ids]


def translation_transformer(torch, epochs=6, seed=0, dropout=0.1, n_train=48):
    import math
    from typing import List
    nn = torch.nn
    Tensor = torch.Tensor
    Transformer = torch.nn.Transformer
    pad_sequence = torch.nn.utils.rnn.pad_sequence
    DataLoader = torch.utils.data.DataLoader
    SRC_LANGUAGE, TGT_LANGUAGE = 'de', 'en'
    train_pairs, val_pairs = _translation_corpus(n_train, seed), _translation_corpus(16, seed + 1)

    token_transform = {SRC_LANGUAGE: str.split, TGT_LANGUAGE: str.split}
    UNK_IDX, PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2, 3
    special_symbols = ['<unk>', '<pad>', '<bos>', '<eos>']
    vocab_transform = {
        SRC_LANGUAGE: _Vocab([w for s, _ in train_pairs for w in s.split()], special_symbols),
        TGT_LANGUAGE: _Vocab([w for _, t in train_pairs for w in t.split()], special_symbols)}

    class PositionalEncoding(nn.Module):
        def __init__(self, emb_size: int, dropout: float, maxlen: int = 5000):
            super(PositionalEncoding, self).__init__()
            den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
            pos = torch.arange(0, maxlen).reshape(maxlen, 1)
            pos_embedding = torch.zeros((maxlen, emb_size))
            pos_embedding[:, 0::2] = torch.sin(pos * den)
            pos_embedding[:, 1::2] = torch.cos(pos * den)
            pos_embedding = pos_embedding.unsqueeze(-2)
            self.dropout = nn.Dropout(dropout)
            self.register_buffer('pos_embedding', pos_embedding)

        def forward(self, token_embedding: Tensor):
            return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])

    class TokenEmbedding(nn.Module):
        def __init__(self, vocab_size: int, emb_size):
            super(TokenEmbedding, self).__init__()
            self.embedding = nn.Embedding(vocab_size, emb_size)
            self.emb_size = emb_size

        def forward(self, tokens: Tensor):
            return self.embedding(tokens.long()) * math.sqrt(self.emb_size)

    class Seq2SeqTransformer(nn.Module):
        def __init__(self, num_encoder_layers: int, num_decoder_layers: int, emb_size: int, nhead: int,
                     src_vocab_size: int, tgt_vocab_size: int, dim_feedforward: int = 512, dropout: float = 0.1):
            super(Seq2SeqTransformer, self).__init__()
            self.transformer = Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                           num_decoder_layers=num_decoder_layers, dim_feedforward=dim_feedforward,
                                           dropout=dropout)
            self.generator = nn.Linear(emb_size, tgt_vocab_size)
            self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
            self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
            self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

        def forward(self, src: Tensor, trg: Tensor, src_mask: Tensor, tgt_mask: Tensor, src_padding_mask: Tensor,
                    tgt_padding_mask: Tensor, memory_key_padding_mask: Tensor):
            src_emb = self.positional_encoding(self.src_tok_emb(src))
            tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
            outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None,
                                    src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
            return self.generator(outs)

        def encode(self, src: Tensor, src_mask: Tensor):
            return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

        def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor):
            return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)

    def generate_square_subsequent_mask(sz):
        mask = (torch.triu(torch.ones((sz, sz), device=DEVICE)) == 1).transpose(0, 1)
        mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
        return mask

    def create_mask(src, tgt):
        src_seq_len = src.shape[0]
        tgt_seq_len = tgt.shape[0]
        tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
        src_mask = torch.zeros((src_seq_len, src_seq_len), device=DEVICE).type(torch.bool)
        src_padding_mask = (src == PAD_IDX).transpose(0, 1)
        tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
        return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask

    torch.manual_seed(0)
    DEVICE = torch.empty(0).device  # the page: 'cuda' if available, else 'cpu'
    SRC_VOCAB_SIZE = len(vocab_transform[SRC_LANGUAGE])
    TGT_VOCAB_SIZE = len(vocab_transform[TGT_LANGUAGE])
    EMB_SIZE, NHEAD, FFN_HID_DIM, BATCH_SIZE = 16, 2, 32, 8
    NUM_ENCODER_LAYERS, NUM_DECODER_LAYERS = 1, 1

    transformer = Seq2SeqTransformer(NUM_ENCODER_LAYERS, NUM_DECODER_LAYERS, EMB_SIZE, NHEAD, SRC_VOCAB_SIZE,
                                     TGT_VOCAB_SIZE, FFN_HID_DIM, dropout=dropout)
    for p in transformer.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    _set_params(torch, transformer, seed, scale=0.3, norms_at_one=True)  # the same start on both libraries
    transformer = transformer.to(DEVICE)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
    optimizer = torch.optim.Adam(transformer.parameters(), lr=0.01, betas=(0.9, 0.98), eps=1e-9)

    def sequential_transforms(*transforms):
        def func(txt_input):
            for transform in transforms:
                txt_input = transform(txt_input)
            return txt_input
        return func

    def tensor_transform(token_ids: List[int]):
        return torch.cat((torch.tensor([BOS_IDX]), torch.tensor(token_ids), torch.tensor([EOS_IDX])))

    text_transform = {}
    for ln in [SRC_LANGUAGE, TGT_LANGUAGE]:
        text_transform[ln] = sequential_transforms(token_transform[ln], vocab_transform[ln], tensor_transform)

    def collate_fn(batch):
        src_batch, tgt_batch = [], []
        for src_sample, tgt_sample in batch:
            src_batch.append(text_transform[SRC_LANGUAGE](src_sample.rstrip("\n")))
            tgt_batch.append(text_transform[TGT_LANGUAGE](tgt_sample.rstrip("\n")))
        src_batch = pad_sequence(src_batch, padding_value=PAD_IDX)
        tgt_batch = pad_sequence(tgt_batch, padding_value=PAD_IDX)
        return src_batch, tgt_batch

    step_losses = []

    def train_epoch(model, optimizer):
        model.train()
        losses = 0
        train_dataloader = DataLoader(train_pairs, batch_size=BATCH_SIZE, collate_fn=collate_fn)
        for src, tgt in train_dataloader:
            src = src.to(DEVICE)
            tgt = tgt.to(DEVICE)
            tgt_input = tgt[:-1, :]
            src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
            logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
            optimizer.zero_grad()
            tgt_out = tgt[1:, :]
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
            loss.backward()
            optimizer.step()
            losses += loss.item()
            step_losses.append(loss.item())
        return losses / len(list(train_dataloader))

    def evaluate(model):
        model.eval()
        losses = 0
        val_dataloader = DataLoader(val_pairs, batch_size=BATCH_SIZE, collate_fn=collate_fn)
        for src, tgt in val_dataloader:
            src = src.to(DEVICE)
            tgt = tgt.to(DEVICE)
            tgt_input = tgt[:-1, :]
            src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
            logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
            tgt_out = tgt[1:, :]
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
            losses += loss.item()
        return losses / len(list(val_dataloader))

    history = []
    for epoch in range(1, epochs + 1):
        train_loss = train_epoch(transformer, optimizer)
        val_loss = evaluate(transformer)
        history.append((train_loss, val_loss))

    def greedy_decode(model, src, src_mask, max_len, start_symbol):
        src = src.to(DEVICE)
        src_mask = src_mask.to(DEVICE)
        memory = model.encode(src, src_mask)
        ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long).to(DEVICE)
        for i in range(max_len - 1):
            memory = memory.to(DEVICE)
            tgt_mask = (generate_square_subsequent_mask(ys.size(0)).type(torch.bool)).to(DEVICE)
            out = model.decode(ys, memory, tgt_mask)
            out = out.transpose(0, 1)
            prob = model.generator(out[:, -1])
            _, next_word = torch.max(prob, dim=1)
            next_word = next_word.item()
            ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
            if next_word == EOS_IDX:
                break
        return ys

    def translate(model: torch.nn.Module, src_sentence: str):
        model.eval()
        src = text_transform[SRC_LANGUAGE](src_sentence).view(-1, 1)
        num_tokens = src.shape[0]
        src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
        tgt_tokens = greedy_decode(model, src, src_mask, max_len=num_tokens + 5, start_symbol=BOS_IDX).flatten()
        return (" ".join(vocab_transform[TGT_LANGUAGE].lookup_tokens(list(tgt_tokens.cpu().numpy())))
                .replace("<bos>", "").replace("<eos>", ""))

    sentence = val_pairs[0][0]
    translation = translate(transformer, sentence)
    # the greedy tokens again, with the logits of one teacher-forced pass over them
    src = text_transform[SRC_LANGUAGE](sentence).view(-1, 1).to(DEVICE)
    n = src.shape[0]
    ys = greedy_decode(transformer, src, torch.zeros(n, n).type(torch.bool), n + 5, BOS_IDX)
    with torch.no_grad():
        memory = transformer.encode(src, torch.zeros(n, n, device=DEVICE).type(torch.bool))
        logits = transformer.generator(transformer.decode(ys[:-1], memory,
                                                          generate_square_subsequent_mask(ys.size(0) - 1)))
        masks = create_mask(src, ys[:-1])
    return dict(history=history, step_losses=step_losses, translation=translation, ys=ys.flatten().cpu().numpy(),
                forced_argmax=logits.argmax(-1).flatten().cpu().numpy(), vocab=len(vocab_transform[TGT_LANGUAGE]),
                masks=[m.cpu().numpy() for m in masks], val_pairs=val_pairs)


def test_translation_transformer():
    out = translation_transformer(lucid)
    (tr0, va0), (tr1, va1) = out["history"][0], out["history"][-1]
    # from above ln(14) (all target words, specials included) to the level of the ten target words
    assert tr0 > 2.8 and tr1 < 2.45 and va1 < 0.9 * va0
    # the greedy decoder's choices are the argmax of the full teacher-forced pass over them
    ys, forced = out["ys"], out["forced_argmax"]
    assert ys[0] == 2 and len(ys) >= 2
    np.testing.assert_array_equal(forced, ys[1:])
    src_mask, tgt_mask, src_pad, tgt_pad = out["masks"]
    assert src_mask.dtype == np.bool_ and not src_mask.any()
    L = tgt_mask.shape[0]
    np.testing.assert_array_equal(np.isinf(tgt_mask), np.triu(np.ones((L, L), bool), 1))
    assert not src_pad.any() and not tgt_pad.any() and src_pad.shape == (1, len(out["val_pairs"][0][0].split()) + 2)
    assert all(w.startswith("e") or w == "<unk>" for w in out["translation"].split())


def test_translation_transformer_torch_parity():
    torch = _reference_torch()
    if lucid.get_default_device().type != "cpu":
        pytest.skip("PyTorch runs on the CPU")
    lo = translation_transformer(lucid, epochs=2, dropout=0.0)
    to = translation_transformer(torch, epochs=2, dropout=0.0)
    np.testing.assert_allclose(lo["step_losses"], to["step_losses"], rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(np.array(lo["history"]), np.array(to["history"]), rtol=2e-3, atol=1e-4)
    assert lo["translation"] == to["translation"]


# ------------------------------------------------------------------ Chatbot Tutorial

PAD_token, SOS_token, EOS_token = 0, 1, 2


class Voc:
    def __init__(self, name):
        self.name = name
        self.trimmed = False
        self.word2index = {}
        self.word2count = {}
        self.index2word = {PAD_token: "PAD", SOS_token: "SOS", EOS_token: "EOS"}
        self.num_words = 3  # Count SOS, EOS, PAD

    def addSentence(self, sentence):
        for word in sentence.split(' '):
            self.addWord(word)

    def addWord(self, word):
        if word not in self.word2index:
            self.word2index[word] = self.num_words
            self.word2count[word] = 1
            self.index2word[self.num_words] = word
            self.num_words += 1
        else:
            self.word2count[word] += 1

    def trim(self, min_count):
        if self.trimmed:
            return
        self.trimmed = True
        keep_words = [k for k, v in self.word2count.items() if v >= min_count]
        self.word2index = {}
        self.word2count = {}
        self.index2word = {PAD_token: "PAD", SOS_token: "SOS", EOS_token: "EOS"}
        self.num_words = 3
        for word in keep_words:
            self.addWord(word)


def _dialog_pairs(n, seed):
    """Query/response pairs of 2-6 words: the response answers each word by its partner."""
    rng = random.Random(seed)
    words = ["hi", "how", "are", "you", "fine", "what", "is", "up", "nothing", "much", "good", "bye"]
    partner = dict(zip(words, words[6:] + words[:6]))
    pairs = []
    for _ in range(n):
        q = [rng.choice(words) for _ in range(rng.randint(2, 6))]
        pairs.append([" ".join(q), " ".join(partner[w] for w in q)])
    return pairs


def chatbot_tutorial(torch, n_iteration=30, attn_model='dot', seed=0, dropout=0.1, teacher_forcing_ratio=1.0,
                     save_dir=None):
    import os
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    device = torch.empty(0).device
    random.seed(seed)
    torch.manual_seed(seed)
    MAX_LENGTH = 10
    voc = Voc("synthetic")
    pairs = _dialog_pairs(64, seed)
    for pair in pairs:
        voc.addSentence(pair[0])
        voc.addSentence(pair[1])

    def indexesFromSentence(voc, sentence):
        return [voc.word2index[word] for word in sentence.split(' ')] + [EOS_token]

    def zeroPadding(l, fillvalue=PAD_token):
        return list(itertools.zip_longest(*l, fillvalue=fillvalue))

    def binaryMatrix(l, value=PAD_token):
        m = []
        for i, seq in enumerate(l):
            m.append([])
            for token in seq:
                if token == PAD_token:
                    m[i].append(0)
                else:
                    m[i].append(1)
        return m

    def inputVar(l, voc):
        indexes_batch = [indexesFromSentence(voc, sentence) for sentence in l]
        lengths = torch.tensor([len(indexes) for indexes in indexes_batch])
        padList = zeroPadding(indexes_batch)
        padVar = torch.LongTensor(padList)
        return padVar, lengths

    def outputVar(l, voc):
        indexes_batch = [indexesFromSentence(voc, sentence) for sentence in l]
        max_target_len = max([len(indexes) for indexes in indexes_batch])
        padList = zeroPadding(indexes_batch)
        mask = binaryMatrix(padList)
        mask = torch.BoolTensor(mask)
        padVar = torch.LongTensor(padList)
        return padVar, mask, max_target_len

    def batch2TrainData(voc, pair_batch):
        pair_batch.sort(key=lambda x: len(x[0].split(" ")), reverse=True)
        input_batch, output_batch = [], []
        for pair in pair_batch:
            input_batch.append(pair[0])
            output_batch.append(pair[1])
        inp, lengths = inputVar(input_batch, voc)
        output, mask, max_target_len = outputVar(output_batch, voc)
        return inp, lengths, output, mask, max_target_len

    class EncoderRNN(nn.Module):
        def __init__(self, hidden_size, embedding, n_layers=1, dropout=0):
            super(EncoderRNN, self).__init__()
            self.n_layers = n_layers
            self.hidden_size = hidden_size
            self.embedding = embedding
            self.gru = nn.GRU(hidden_size, hidden_size, n_layers,
                              dropout=(0 if n_layers == 1 else dropout), bidirectional=True)

        def forward(self, input_seq, input_lengths, hidden=None):
            embedded = self.embedding(input_seq)
            packed = nn.utils.rnn.pack_padded_sequence(embedded, input_lengths)
            outputs, hidden = self.gru(packed, hidden)
            outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs)
            outputs = outputs[:, :, :self.hidden_size] + outputs[:, :, self.hidden_size:]
            return outputs, hidden

    class Attn(nn.Module):
        def __init__(self, method, hidden_size):
            super(Attn, self).__init__()
            self.method = method
            if self.method not in ['dot', 'general', 'concat']:
                raise ValueError(self.method, "is not an appropriate attention method.")
            self.hidden_size = hidden_size
            if self.method == 'general':
                self.attn = nn.Linear(self.hidden_size, hidden_size)
            elif self.method == 'concat':
                self.attn = nn.Linear(self.hidden_size * 2, hidden_size)
                self.v = nn.Parameter(torch.FloatTensor(hidden_size))

        def dot_score(self, hidden, encoder_output):
            return torch.sum(hidden * encoder_output, dim=2)

        def general_score(self, hidden, encoder_output):
            energy = self.attn(encoder_output)
            return torch.sum(hidden * energy, dim=2)

        def concat_score(self, hidden, encoder_output):
            energy = self.attn(torch.cat((hidden.expand(encoder_output.size(0), -1, -1), encoder_output), 2)).tanh()
            return torch.sum(self.v * energy, dim=2)

        def forward(self, hidden, encoder_outputs):
            if self.method == 'general':
                attn_energies = self.general_score(hidden, encoder_outputs)
            elif self.method == 'concat':
                attn_energies = self.concat_score(hidden, encoder_outputs)
            elif self.method == 'dot':
                attn_energies = self.dot_score(hidden, encoder_outputs)
            attn_energies = attn_energies.t()
            return F.softmax(attn_energies, dim=1).unsqueeze(1)

    class LuongAttnDecoderRNN(nn.Module):
        def __init__(self, attn_model, embedding, hidden_size, output_size, n_layers=1, dropout=0.1):
            super(LuongAttnDecoderRNN, self).__init__()
            self.attn_model = attn_model
            self.hidden_size = hidden_size
            self.output_size = output_size
            self.n_layers = n_layers
            self.dropout = dropout
            self.embedding = embedding
            self.embedding_dropout = nn.Dropout(dropout)
            self.gru = nn.GRU(hidden_size, hidden_size, n_layers, dropout=(0 if n_layers == 1 else dropout))
            self.concat = nn.Linear(hidden_size * 2, hidden_size)
            self.out = nn.Linear(hidden_size, output_size)
            self.attn = Attn(attn_model, hidden_size)

        def forward(self, input_step, last_hidden, encoder_outputs):
            embedded = self.embedding(input_step)
            embedded = self.embedding_dropout(embedded)
            rnn_output, hidden = self.gru(embedded, last_hidden)
            attn_weights = self.attn(rnn_output, encoder_outputs)
            context = attn_weights.bmm(encoder_outputs.transpose(0, 1))
            rnn_output = rnn_output.squeeze(0)
            context = context.squeeze(1)
            concat_input = torch.cat((rnn_output, context), 1)
            concat_output = torch.tanh(self.concat(concat_input))
            output = self.out(concat_output)
            output = F.softmax(output, dim=1)
            return output, hidden

    def maskNLLLoss(inp, target, mask):
        nTotal = mask.sum()
        crossEntropy = -torch.log(torch.gather(inp, 1, target.view(-1, 1)).squeeze(1))
        loss = crossEntropy.masked_select(mask).mean()
        loss = loss.to(device)
        return loss, nTotal.item()

    def train(input_variable, lengths, target_variable, mask, max_target_len, encoder, decoder, embedding,
              encoder_optimizer, decoder_optimizer, batch_size, clip, max_length=MAX_LENGTH):
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        input_variable = input_variable.to(device)
        target_variable = target_variable.to(device)
        mask = mask.to(device)
        # Lengths for RNN packing should always be on the CPU
        lengths = lengths.to("cpu")
        loss = 0
        print_losses = []
        n_totals = 0
        encoder_outputs, encoder_hidden = encoder(input_variable, lengths)
        decoder_input = torch.LongTensor([[SOS_token for _ in range(batch_size)]])
        decoder_input = decoder_input.to(device)
        decoder_hidden = encoder_hidden[:decoder.n_layers]
        use_teacher_forcing = True if random.random() < teacher_forcing_ratio else False
        if use_teacher_forcing:
            for t in range(max_target_len):
                decoder_output, decoder_hidden = decoder(decoder_input, decoder_hidden, encoder_outputs)
                decoder_input = target_variable[t].view(1, -1)
                mask_loss, nTotal = maskNLLLoss(decoder_output, target_variable[t], mask[t])
                loss += mask_loss
                print_losses.append(mask_loss.item() * nTotal)
                n_totals += nTotal
        else:
            for t in range(max_target_len):
                decoder_output, decoder_hidden = decoder(decoder_input, decoder_hidden, encoder_outputs)
                _, topi = decoder_output.topk(1)
                decoder_input = torch.LongTensor([[topi[i][0] for i in range(batch_size)]])
                decoder_input = decoder_input.to(device)
                mask_loss, nTotal = maskNLLLoss(decoder_output, target_variable[t], mask[t])
                loss += mask_loss
                print_losses.append(mask_loss.item() * nTotal)
                n_totals += nTotal
        loss.backward()
        _ = nn.utils.clip_grad_norm_(encoder.parameters(), clip)
        _ = nn.utils.clip_grad_norm_(decoder.parameters(), clip)
        encoder_optimizer.step()
        decoder_optimizer.step()
        return sum(print_losses) / n_totals

    losses = []

    def trainIters(model_name, voc, pairs, encoder, decoder, encoder_optimizer, decoder_optimizer, embedding,
                   encoder_n_layers, decoder_n_layers, save_dir, n_iteration, batch_size, print_every, save_every,
                   clip, corpus_name, loadFilename):
        training_batches = [batch2TrainData(voc, [random.choice(pairs) for _ in range(batch_size)])
                            for _ in range(n_iteration)]
        start_iteration = 1
        for iteration in range(start_iteration, n_iteration + 1):
            training_batch = training_batches[iteration - 1]
            input_variable, lengths, target_variable, mask, max_target_len = training_batch
            loss = train(input_variable, lengths, target_variable, mask, max_target_len, encoder,
                         decoder, embedding, encoder_optimizer, decoder_optimizer, batch_size, clip)
            losses.append(loss)
            if save_dir is not None and iteration % save_every == 0:
                directory = os.path.join(save_dir, model_name, corpus_name,
                                         '{}-{}_{}'.format(encoder_n_layers, decoder_n_layers, hidden_size))
                if not os.path.exists(directory):
                    os.makedirs(directory)
                torch.save({
                    'iteration': iteration,
                    'en': encoder.state_dict(),
                    'de': decoder.state_dict(),
                    'en_opt': encoder_optimizer.state_dict(),
                    'de_opt': decoder_optimizer.state_dict(),
                    'loss': loss,
                    'voc_dict': voc.__dict__,
                    'embedding': embedding.state_dict()
                }, os.path.join(directory, '{}_{}.tar'.format(iteration, 'checkpoint')))

    class GreedySearchDecoder(nn.Module):
        def __init__(self, encoder, decoder):
            super(GreedySearchDecoder, self).__init__()
            self.encoder = encoder
            self.decoder = decoder

        def forward(self, input_seq, input_length, max_length):
            encoder_outputs, encoder_hidden = self.encoder(input_seq, input_length)
            decoder_hidden = encoder_hidden[:decoder.n_layers]
            decoder_input = torch.ones(1, 1, device=device, dtype=torch.long) * SOS_token
            all_tokens = torch.zeros([0], device=device, dtype=torch.long)
            all_scores = torch.zeros([0], device=device)
            for _ in range(max_length):
                decoder_output, decoder_hidden = self.decoder(decoder_input, decoder_hidden, encoder_outputs)
                decoder_scores, decoder_input = torch.max(decoder_output, dim=1)
                all_tokens = torch.cat((all_tokens, decoder_input), dim=0)
                all_scores = torch.cat((all_scores, decoder_scores), dim=0)
                decoder_input = torch.unsqueeze(decoder_input, 0)
            return all_tokens, all_scores

    def evaluate(encoder, decoder, searcher, voc, sentence, max_length=MAX_LENGTH):
        indexes_batch = [indexesFromSentence(voc, sentence)]
        lengths = torch.tensor([len(indexes) for indexes in indexes_batch])
        input_batch = torch.LongTensor(indexes_batch).transpose(0, 1)
        input_batch = input_batch.to(device)
        lengths = lengths.to("cpu")
        tokens, scores = searcher(input_batch, lengths, max_length)
        decoded_words = [voc.index2word[token.item()] for token in tokens]
        return decoded_words, scores

    # the page's validation batch
    small = batch2TrainData(voc, [random.choice(pairs) for _ in range(5)])
    model_name, corpus_name = 'cb_model', 'synthetic'
    hidden_size, encoder_n_layers, decoder_n_layers, batch_size = 16, 2, 2, 8
    embedding = nn.Embedding(voc.num_words, hidden_size)
    encoder = EncoderRNN(hidden_size, embedding, encoder_n_layers, dropout)
    decoder = LuongAttnDecoderRNN(attn_model, embedding, hidden_size, voc.num_words, decoder_n_layers, dropout)
    _set_params(torch, encoder, seed)
    _set_params(torch, decoder, seed + 1)  # the shared embedding gets the decoder's draw
    encoder = encoder.to(device)
    decoder = decoder.to(device)

    clip, learning_rate, decoder_learning_ratio = 50.0, 0.003, 5.0
    encoder.train()
    decoder.train()
    encoder_optimizer = optim.Adam(encoder.parameters(), lr=learning_rate)
    decoder_optimizer = optim.Adam(decoder.parameters(), lr=learning_rate * decoder_learning_ratio)
    trainIters(model_name, voc, pairs, encoder, decoder, encoder_optimizer, decoder_optimizer, embedding,
               encoder_n_layers, decoder_n_layers, save_dir, n_iteration, batch_size, 1, n_iteration, clip,
               corpus_name, None)

    encoder.eval()
    decoder.eval()
    searcher = GreedySearchDecoder(encoder, decoder)
    query = pairs[0][0]
    with torch.no_grad():
        words, scores = evaluate(encoder, decoder, searcher, voc, query)
        # maskNLLLoss and the encoder on the validation batch, for closed-form checks
        inp, lengths, target, mask, max_target_len = small
        enc_out, enc_hidden = encoder(inp.to(device), lengths.to("cpu"))
        probs = torch.softmax(torch.randn(mask.shape[1], voc.num_words), 1)
        nll, n_total = maskNLLLoss(probs.to(device), target[0].to(device), mask[0].to(device))
    return dict(losses=losses, words=words, scores=scores.cpu().numpy(), query=query, pairs=pairs,
                small=[t.cpu().numpy() if hasattr(t, "cpu") else t for t in small],
                enc_out=enc_out.cpu().numpy(), enc_hidden=enc_hidden.cpu().numpy(),
                probs=probs.cpu().numpy(), nll=nll.item(), n_total=n_total, voc=voc)


@pytest.mark.parametrize("attn_model", ["dot", "general", "concat"])
def test_chatbot(attn_model, tmp_path):
    out = chatbot_tutorial(lucid, attn_model=attn_model, n_iteration=30 if attn_model == "dot" else 12,
                           save_dir=str(tmp_path))
    losses = np.array(out["losses"])
    assert losses[0] > 2.0 and losses[-3:].mean() < (0.85 if attn_model == "dot" else 0.97) * losses[:3].mean()
    ckpt = list(tmp_path.rglob("*_checkpoint.tar"))
    assert [p.name for p in ckpt] == [f"{len(losses)}_checkpoint.tar"] and ckpt[0].parent.name == "2-2_16"
    saved = lucid.load(str(ckpt[0]), weights_only=False)
    assert saved["iteration"] == len(losses) and saved["voc_dict"]["num_words"] == out["voc"].num_words
    assert "gru.weight_ih_l0_reverse" in saved["en"] and saved["en_opt"]["state"]
    # the data preparation: time-major, padded with PAD after EOS, lengths sorted, mask = tokens != PAD
    inp, lengths, target, mask, max_target_len = out["small"]
    assert inp.shape[1] == 5 and list(lengths) == sorted(lengths, reverse=True)
    assert all(inp[lengths[b] - 1, b] == EOS_token and (inp[lengths[b]:, b] == PAD_token).all() for b in range(5))
    np.testing.assert_array_equal(mask, target != PAD_token)
    assert max_target_len == target.shape[0] and mask.dtype == np.bool_
    # packed sequences: the summed bidirectional outputs are zero past each length
    for b in range(5):
        assert np.abs(out["enc_out"][lengths[b]:, b]).max(initial=0.0) == 0.0
        assert np.abs(out["enc_out"][:lengths[b], b]).min() > 0.0
    assert out["enc_hidden"].shape == (4, 5, 16)
    # maskNLLLoss: mean of -log p(target) over the unmasked rows
    probs, t0, m0 = out["probs"], target[0], mask[0]
    np.testing.assert_allclose(out["nll"], -np.log(probs[np.arange(5), t0])[m0].mean(), rtol=1e-5)
    assert out["n_total"] == m0.sum()
    # greedy search: MAX_LENGTH tokens with their softmax scores
    assert len(out["words"]) == 10 and np.all((out["scores"] > 0) & (out["scores"] <= 1))


def test_chatbot_greedy_feeding():
    out = chatbot_tutorial(lucid, n_iteration=6, teacher_forcing_ratio=0.0)
    assert all(np.isfinite(out["losses"])) and len(out["losses"]) == 6


def test_chatbot_torch_parity():
    torch = _reference_torch()
    if lucid.get_default_device().type != "cpu":
        pytest.skip("PyTorch runs on the CPU")
    for attn_model in ("dot", "concat"):
        lo = chatbot_tutorial(lucid, n_iteration=6, attn_model=attn_model, dropout=0.0)
        to = chatbot_tutorial(torch, n_iteration=6, attn_model=attn_model, dropout=0.0)
        np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-3, atol=1e-5)
        np.testing.assert_allclose(lo["enc_out"], to["enc_out"], rtol=1e-3, atol=1e-4)
        assert lo["words"] == to["words"]
    lo = chatbot_tutorial(lucid, n_iteration=4, dropout=0.0, teacher_forcing_ratio=0.0)
    to = chatbot_tutorial(torch, n_iteration=4, dropout=0.0, teacher_forcing_ratio=0.0)
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-3, atol=1e-5)
