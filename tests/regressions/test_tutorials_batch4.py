"""PyTorch tutorials run on Lucid (``import lucid as torch``), fourth batch: "Knowledge
Distillation" (teacher/student CNNs, soft-target KL loss, cosine-embedding loss on hidden
representations, an intermediate regressor), "NLP From Scratch: Generating Names with a
Character-Level RNN", "NLP From Scratch: Translation with a Sequence to Sequence Network and
Attention" (GRU encoder, Bahdanau attention decoder, teacher forcing) and "Language Modeling
with nn.Transformer" (positional encoding, batchify/get_batch, the square subsequent mask,
``clip_grad_norm_``, ``StepLR``). Data sets are replaced by small synthetic ones of the same
shapes; models are shrunk; epochs cut to a few steps.

Each tutorial is a function of the module it is handed as ``torch``, so the same text runs on
Lucid and, where PyTorch is installed, on PyTorch with the same starting weights (set from
NumPy): the parity tests compare the losses step by step.
"""
import math
import string

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.optim.lr_scheduler  # noqa: F401


def npy(t):
    return t.detach().cpu().numpy()


def _set_params(model, seed, scale=0.2, dropout=None):
    """Give every parameter of ``model`` values drawn by NumPy: the same start on both libraries.
    ``dropout`` (for the parity runs: the two random streams differ) resets every Dropout's ``p``."""
    rng = np.random.default_rng(seed)
    mod = lucid if isinstance(model, lucid.nn.Module) else __import__("torch")
    with mod.no_grad():
        for p in model.parameters():
            p.copy_(mod.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=p.dtype))
    for m in model.modules():
        if dropout is not None and isinstance(m, mod.nn.Dropout):
            m.p = dropout
    return model


def _needs_cpu_default(why):
    """Host-bound scripts as written (PyTorch mixes devices there too): the strict passes run the others."""
    if lucid.get_default_device().type != "cpu":
        pytest.skip(why + "; the default device is " + str(lucid.get_default_device()))


def _data(torch, seed, n, shape, classes):
    """Random 'images' whose class lights up one channel-row: a learnable task."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.normal(scale=0.3, size=(n,) + shape).astype(np.float32)
    x[np.arange(n), y % shape[0], y % shape[1], :] += 2.0
    return torch.tensor(x), torch.tensor(y)


# ------------------------------------------------------------------------ Knowledge Distillation

def _kd_models(torch, nn):
    class DeepNN(nn.Module):
        def __init__(self, num_classes=10):
            super(DeepNN, self).__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, kernel_size=3, padding=1), nn.ReLU(),
                nn.Conv2d(16, 8, kernel_size=3, padding=1), nn.ReLU(),
                nn.MaxPool2d(kernel_size=2, stride=2),
                nn.Conv2d(8, 8, kernel_size=3, padding=1), nn.ReLU(),
                nn.Conv2d(8, 8, kernel_size=3, padding=1), nn.ReLU(),
                nn.MaxPool2d(kernel_size=2, stride=2),
            )
            self.classifier = nn.Sequential(
                nn.Linear(32, 24), nn.ReLU(), nn.Dropout(0.1), nn.Linear(24, num_classes))

        def forward(self, x):
            x = self.features(x)
            x = torch.flatten(x, 1)
            x = self.classifier(x)
            return x

    class LightNN(nn.Module):
        def __init__(self, num_classes=10):
            super(LightNN, self).__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 4, kernel_size=3, padding=1), nn.ReLU(),
                nn.MaxPool2d(kernel_size=2, stride=2),
                nn.Conv2d(4, 4, kernel_size=3, padding=1), nn.ReLU(),
                nn.MaxPool2d(kernel_size=2, stride=2),
            )
            self.classifier = nn.Sequential(nn.Linear(16, 12), nn.ReLU(), nn.Dropout(0.1), nn.Linear(12, num_classes))

        def forward(self, x):
            x = self.features(x)
            x = torch.flatten(x, 1)
            x = self.classifier(x)
            return x

    class ModifiedDeepNNCosine(DeepNN):
        def forward(self, x):
            x = self.features(x)
            flattened_conv_output = torch.flatten(x, 1)
            x = self.classifier(flattened_conv_output)
            flattened_conv_output_after_pooling = torch.nn.functional.avg_pool1d(flattened_conv_output, 2)
            return x, flattened_conv_output_after_pooling

    class ModifiedLightNNCosine(LightNN):
        def forward(self, x):
            x = self.features(x)
            flattened_conv_output = torch.flatten(x, 1)
            x = self.classifier(flattened_conv_output)
            return x, flattened_conv_output

    class ModifiedDeepNNRegressor(DeepNN):
        def forward(self, x):
            x = self.features(x)
            conv_feature_map = x
            x = torch.flatten(x, 1)
            x = self.classifier(x)
            return x, conv_feature_map

    class ModifiedLightNNRegressor(LightNN):
        def __init__(self, num_classes=10):
            super().__init__(num_classes)
            self.regressor = nn.Sequential(nn.Conv2d(4, 8, kernel_size=3, padding=1))

        def forward(self, x):
            x = self.features(x)
            regressor_output = self.regressor(x)
            x = torch.flatten(x, 1)
            x = self.classifier(x)
            return x, regressor_output

    return dict(DeepNN=DeepNN, LightNN=LightNN, DeepCos=ModifiedDeepNNCosine, LightCos=ModifiedLightNNCosine,
                DeepReg=ModifiedDeepNNRegressor, LightReg=ModifiedLightNNRegressor)


def knowledge_distillation(torch, seed=0, epochs=3, dropout=None):
    nn, optim = torch.nn, torch.optim
    device = torch.empty(0).device
    M = _kd_models(torch, nn)
    x, y = _data(torch, seed, 32, (3, 8, 8), 10)
    train_loader = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 32, 8)]
    out = {}

    def train(model, train_loader, epochs, learning_rate, device):
        criterion = nn.CrossEntropyLoss()
        optimizer = optim.Adam(model.parameters(), lr=learning_rate)
        model.train()
        losses = []
        for epoch in range(epochs):
            running_loss = 0.0
            for inputs, labels in train_loader:
                inputs, labels = inputs.to(device), labels.to(device)
                optimizer.zero_grad()
                outputs = model(inputs)
                loss = criterion(outputs, labels)
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            losses.append(running_loss / len(train_loader))
        return losses

    def test(model, test_loader, device):
        model.eval()
        correct, total = 0, 0
        with torch.no_grad():
            for inputs, labels in test_loader:
                inputs, labels = inputs.to(device), labels.to(device)
                outputs = model(inputs)
                if isinstance(outputs, tuple):
                    outputs = outputs[0]
                _, predicted = torch.max(outputs.data, 1)
                total += labels.size(0)
                correct += (predicted == labels).sum().item()
        return 100 * correct / total

    torch.manual_seed(42)
    nn_deep = _set_params(M["DeepNN"](num_classes=10).to(device), seed + 1, dropout=dropout)
    out["teacher"] = train(nn_deep, train_loader, epochs=epochs, learning_rate=0.01, device=device)
    out["teacher_acc"] = test(nn_deep, train_loader, device)

    torch.manual_seed(42)
    nn_light = _set_params(M["LightNN"](num_classes=10).to(device), seed + 2, dropout=dropout)
    torch.manual_seed(42)
    new_nn_light = _set_params(M["LightNN"](num_classes=10).to(device), seed + 2, dropout=dropout)
    out["same_start"] = float(torch.norm(nn_light.features[0].weight - new_nn_light.features[0].weight).item())
    out["n_params"] = (sum(p.numel() for p in nn_deep.parameters()), sum(p.numel() for p in nn_light.parameters()))
    out["student_ce"] = train(nn_light, train_loader, epochs=epochs, learning_rate=0.01, device=device)

    def train_knowledge_distillation(teacher, student, train_loader, epochs, learning_rate, T,
                                     soft_target_loss_weight, ce_loss_weight, device):
        ce_loss = nn.CrossEntropyLoss()
        optimizer = optim.Adam(student.parameters(), lr=learning_rate)
        teacher.eval()
        student.train()
        losses = []
        for epoch in range(epochs):
            running_loss = 0.0
            for inputs, labels in train_loader:
                inputs, labels = inputs.to(device), labels.to(device)
                optimizer.zero_grad()
                with torch.no_grad():
                    teacher_logits = teacher(inputs)
                student_logits = student(inputs)
                soft_targets = nn.functional.softmax(teacher_logits / T, dim=-1)
                soft_prob = nn.functional.log_softmax(student_logits / T, dim=-1)
                soft_targets_loss = torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0] * (T**2)
                label_loss = ce_loss(student_logits, labels)
                loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            losses.append(running_loss / len(train_loader))
        return losses

    out["kd"] = train_knowledge_distillation(teacher=nn_deep, student=new_nn_light, train_loader=train_loader,
                                             epochs=epochs, learning_rate=0.01, T=2, soft_target_loss_weight=0.25,
                                             ce_loss_weight=0.75, device=device)
    out["kd_acc"] = test(new_nn_light, train_loader, device)

    # Cosine loss on the hidden representations.
    torch.manual_seed(42)
    modified_nn_deep = M["DeepCos"](num_classes=10).to(device)
    modified_nn_deep.load_state_dict(nn_deep.state_dict())
    torch.manual_seed(42)
    modified_nn_light = _set_params(M["LightCos"](num_classes=10).to(device), seed + 2, dropout=dropout)
    sample_input = torch.randn(8, 3, 8, 8).to(device)
    logits, hidden_representation = modified_nn_light(sample_input)
    out["cos_shapes"] = (tuple(logits.shape), tuple(hidden_representation.shape))
    logits, hidden_representation = modified_nn_deep(sample_input)
    out["cos_shapes"] += (tuple(logits.shape), tuple(hidden_representation.shape))

    def train_cosine_loss(teacher, student, train_loader, epochs, learning_rate, hidden_rep_loss_weight,
                          ce_loss_weight, device):
        ce_loss = nn.CrossEntropyLoss()
        cosine_loss = nn.CosineEmbeddingLoss()
        optimizer = optim.Adam(student.parameters(), lr=learning_rate)
        teacher.to(device)
        student.to(device)
        teacher.eval()
        student.train()
        losses = []
        for epoch in range(epochs):
            running_loss = 0.0
            for inputs, labels in train_loader:
                inputs, labels = inputs.to(device), labels.to(device)
                optimizer.zero_grad()
                with torch.no_grad():
                    _, teacher_hidden_representation = teacher(inputs)
                student_logits, student_hidden_representation = student(inputs)
                hidden_rep_loss = cosine_loss(student_hidden_representation, teacher_hidden_representation,
                                              target=torch.ones(inputs.size(0)).to(device))
                label_loss = ce_loss(student_logits, labels)
                loss = hidden_rep_loss_weight * hidden_rep_loss + ce_loss_weight * label_loss
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            losses.append(running_loss / len(train_loader))
        return losses

    out["cos"] = train_cosine_loss(teacher=modified_nn_deep, student=modified_nn_light, train_loader=train_loader,
                                   epochs=epochs, learning_rate=0.01, hidden_rep_loss_weight=0.25,
                                   ce_loss_weight=0.75, device=device)
    out["cos_acc"] = test(modified_nn_light, train_loader, device)

    # Intermediate regressor.
    torch.manual_seed(42)
    modified_nn_deep_reg = M["DeepReg"](num_classes=10).to(device)
    modified_nn_deep_reg.load_state_dict(nn_deep.state_dict())
    torch.manual_seed(42)
    modified_nn_light_reg = _set_params(M["LightReg"](num_classes=10).to(device), seed + 3, dropout=dropout)

    def train_mse_loss(teacher, student, train_loader, epochs, learning_rate, feature_map_weight, ce_loss_weight, device):
        ce_loss = nn.CrossEntropyLoss()
        mse_loss = nn.MSELoss()
        optimizer = optim.Adam(student.parameters(), lr=learning_rate)
        teacher.to(device)
        student.to(device)
        teacher.eval()
        student.train()
        losses = []
        for epoch in range(epochs):
            running_loss = 0.0
            for inputs, labels in train_loader:
                inputs, labels = inputs.to(device), labels.to(device)
                optimizer.zero_grad()
                with torch.no_grad():
                    _, teacher_feature_map = teacher(inputs)
                student_logits, regressor_feature_map = student(inputs)
                hidden_rep_loss = mse_loss(regressor_feature_map, teacher_feature_map)
                label_loss = ce_loss(student_logits, labels)
                loss = feature_map_weight * hidden_rep_loss + ce_loss_weight * label_loss
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
            losses.append(running_loss / len(train_loader))
        return losses

    out["reg"] = train_mse_loss(teacher=modified_nn_deep_reg, student=modified_nn_light_reg, train_loader=train_loader,
                                epochs=epochs, learning_rate=0.01, feature_map_weight=0.25, ce_loss_weight=0.75,
                                device=device)
    out["reg_acc"] = test(modified_nn_light_reg, train_loader, device)
    return out


def test_knowledge_distillation():
    out = knowledge_distillation(lucid, epochs=6)
    assert out["same_start"] == 0.0
    assert out["n_params"] == (3 * 16 * 9 + 16 + 16 * 8 * 9 + 8 + 2 * (8 * 8 * 9 + 8) + 32 * 24 + 24 + 24 * 10 + 10,
                               3 * 4 * 9 + 4 + 4 * 4 * 9 + 4 + 16 * 12 + 12 + 12 * 10 + 10)
    assert out["cos_shapes"] == ((8, 10), (8, 16), (8, 10), (8, 16))
    for k in ("teacher", "student_ce", "kd", "cos", "reg"):
        assert out[k][-1] < 0.8 * out[k][0], (k, out[k])
    assert out["teacher_acc"] > 30


def test_knowledge_distillation_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = knowledge_distillation(lucid, epochs=2, dropout=0.0), knowledge_distillation(torch, epochs=2, dropout=0.0)
    for k in ("teacher", "student_ce", "kd", "cos", "reg"):
        np.testing.assert_allclose(lo[k], to[k], rtol=2e-3, err_msg=k)
    for k in ("n_params", "cos_shapes", "same_start"):
        assert lo[k] == to[k]


# ------------------------------------------------- NLP From Scratch: Generating Names (char RNN)

all_letters = string.ascii_letters + " .,;'-"
n_letters = len(all_letters) + 1  # Plus EOS marker
_NAMES = {"English": ["Abbott", "Ashley", "Baker", "Barnes"], "Russian": ["Abakumov", "Babin", "Vasin", "Rakov"],
          "Japanese": ["Abe", "Sato", "Takahashi", "Tanaka"]}


def char_rnn_generation(torch, n_iters=40, seed=0, dropout=None):
    nn = torch.nn
    all_categories = list(_NAMES)
    category_lines = _NAMES
    n_categories = len(all_categories)

    class RNN(nn.Module):
        def __init__(self, input_size, hidden_size, output_size):
            super(RNN, self).__init__()
            self.hidden_size = hidden_size
            self.i2h = nn.Linear(n_categories + input_size + hidden_size, hidden_size)
            self.i2o = nn.Linear(n_categories + input_size + hidden_size, output_size)
            self.o2o = nn.Linear(hidden_size + output_size, output_size)
            self.dropout = nn.Dropout(0.1)
            self.softmax = nn.LogSoftmax(dim=1)

        def forward(self, category, input, hidden):
            input_combined = torch.cat((category, input, hidden), 1)
            hidden = self.i2h(input_combined)
            output = self.i2o(input_combined)
            output_combined = torch.cat((hidden, output), 1)
            output = self.o2o(output_combined)
            output = self.dropout(output)
            output = self.softmax(output)
            return output, hidden

        def initHidden(self):
            return torch.zeros(1, self.hidden_size)

    rng = np.random.default_rng(seed)

    def randomChoice(l):
        return l[int(rng.integers(0, len(l)))]

    def randomTrainingPair():
        category = randomChoice(all_categories)
        line = randomChoice(category_lines[category])
        return category, line

    def categoryTensor(category):
        li = all_categories.index(category)
        tensor = torch.zeros(1, n_categories)
        tensor[0][li] = 1
        return tensor

    def inputTensor(line):
        tensor = torch.zeros(len(line), 1, n_letters)
        for li in range(len(line)):
            letter = line[li]
            tensor[li][0][all_letters.find(letter)] = 1
        return tensor

    def targetTensor(line):
        letter_indexes = [all_letters.find(line[li]) for li in range(1, len(line))]
        letter_indexes.append(n_letters - 1)  # EOS
        return torch.LongTensor(letter_indexes)

    def randomTrainingExample():
        category, line = randomTrainingPair()
        category_tensor = categoryTensor(category)
        input_line_tensor = inputTensor(line)
        target_line_tensor = targetTensor(line)
        return category_tensor, input_line_tensor, target_line_tensor

    criterion = nn.NLLLoss()
    learning_rate = 0.01
    rnn = _set_params(RNN(n_letters, 16, n_letters), seed + 1, scale=0.1, dropout=dropout)

    def train(category_tensor, input_line_tensor, target_line_tensor):
        target_line_tensor.unsqueeze_(-1)
        hidden = rnn.initHidden()
        rnn.zero_grad()
        loss = torch.Tensor([0])  # you can also just simply use ``loss = 0``
        for i in range(input_line_tensor.size(0)):
            output, hidden = rnn(category_tensor, input_line_tensor[i], hidden)
            l = criterion(output, target_line_tensor[i])
            loss += l
        loss.backward()
        for p in rnn.parameters():
            p.data.add_(p.grad.data, alpha=-learning_rate)
        return output, loss.item() / input_line_tensor.size(0)

    losses = []
    for iter in range(1, n_iters + 1):
        output, loss = train(*randomTrainingExample())
        losses.append(loss)

    max_length = 10

    def sample(category, start_letter='A'):
        with torch.no_grad():
            category_tensor = categoryTensor(category)
            input = inputTensor(start_letter)
            hidden = rnn.initHidden()
            output_name = start_letter
            for i in range(max_length):
                output, hidden = rnn(category_tensor, input[0], hidden)
                topv, topi = output.topk(1)
                topi = topi[0][0]
                if topi == n_letters - 1:
                    break
                else:
                    letter = all_letters[topi]
                    output_name += letter
                input = inputTensor(letter)
            return output_name

    rnn.eval()
    samples = [sample(c, s) for c in all_categories for s in "ABST"]
    return dict(losses=losses, samples=samples, targets=npy(targetTensor("Abe")), inp=npy(inputTensor("Ab")))


def test_char_rnn_generation():
    _needs_cpu_default("the tutorial's torch.LongTensor targets are CPU tensors (legacy constructor)")
    out = char_rnn_generation(lucid, n_iters=300)
    assert out["targets"].tolist() == [all_letters.find("b"), all_letters.find("e"), n_letters - 1]
    assert out["inp"].shape == (2, 1, n_letters) and out["inp"].sum() == 2
    assert np.mean(out["losses"][-50:]) < 0.6 * np.mean(out["losses"][:50])
    assert all(isinstance(s, str) and 1 <= len(s) <= 11 for s in out["samples"])
    assert {s[0] for s in out["samples"]} == set("ABST")
    assert any(len(s) > 1 for s in out["samples"])


def test_char_rnn_generation_torch_parity():
    _needs_cpu_default("the tutorial's torch.LongTensor targets are CPU tensors (legacy constructor)")
    torch = pytest.importorskip("torch")
    lo = char_rnn_generation(lucid, n_iters=20, dropout=0.0)
    to = char_rnn_generation(torch, n_iters=20, dropout=0.0)
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-4)
    assert lo["samples"] == to["samples"]


# ------------------------------------- NLP From Scratch: Translation with a seq2seq network + attention

SOS_token, EOS_token = 0, 1
MAX_LENGTH = 6


class Lang:
    def __init__(self, name):
        self.name = name
        self.word2index = {}
        self.word2count = {}
        self.index2word = {0: "SOS", 1: "EOS"}
        self.n_words = 2  # Count SOS and EOS

    def addSentence(self, sentence):
        for word in sentence.split(' '):
            self.addWord(word)

    def addWord(self, word):
        if word not in self.word2index:
            self.word2index[word] = self.n_words
            self.word2count[word] = 1
            self.index2word[self.n_words] = word
            self.n_words += 1
        else:
            self.word2count[word] += 1


_PAIRS = [("je suis grand", "i am tall"), ("je suis petit", "i am small"), ("tu es grand", "you are tall"),
          ("tu es petit", "you are small"), ("il est grand", "he is tall"), ("il est petit", "he is small"),
          ("nous sommes la", "we are here"), ("elle est la", "she is here")]


def seq2seq_translation(torch, n_epochs=30, seed=0, dropout=None, hidden_size=16, batch_size=4):
    nn, optim = torch.nn, torch.optim
    F = torch.nn.functional
    from importlib import import_module
    data_mod = import_module(torch.__name__ + ".utils.data")
    TensorDataset, DataLoader, RandomSampler = data_mod.TensorDataset, data_mod.DataLoader, data_mod.RandomSampler
    device = torch.empty(0).device

    input_lang, output_lang = Lang("fra"), Lang("eng")
    pairs = [list(p) for p in _PAIRS]
    for pair in pairs:
        input_lang.addSentence(pair[0])
        output_lang.addSentence(pair[1])

    class EncoderRNN(nn.Module):
        def __init__(self, input_size, hidden_size, dropout_p=0.1):
            super(EncoderRNN, self).__init__()
            self.hidden_size = hidden_size
            self.embedding = nn.Embedding(input_size, hidden_size)
            self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, input):
            embedded = self.dropout(self.embedding(input))
            output, hidden = self.gru(embedded)
            return output, hidden

    class BahdanauAttention(nn.Module):
        def __init__(self, hidden_size):
            super(BahdanauAttention, self).__init__()
            self.Wa = nn.Linear(hidden_size, hidden_size)
            self.Ua = nn.Linear(hidden_size, hidden_size)
            self.Va = nn.Linear(hidden_size, 1)

        def forward(self, query, keys):
            scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
            scores = scores.squeeze(2).unsqueeze(1)
            weights = F.softmax(scores, dim=-1)
            context = torch.bmm(weights, keys)
            return context, weights

    class AttnDecoderRNN(nn.Module):
        def __init__(self, hidden_size, output_size, dropout_p=0.1):
            super(AttnDecoderRNN, self).__init__()
            self.embedding = nn.Embedding(output_size, hidden_size)
            self.attention = BahdanauAttention(hidden_size)
            self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
            self.out = nn.Linear(hidden_size, output_size)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
            batch_size = encoder_outputs.size(0)
            decoder_input = torch.empty(batch_size, 1, dtype=torch.long, device=device).fill_(SOS_token)
            decoder_hidden = encoder_hidden
            decoder_outputs = []
            attentions = []
            for i in range(MAX_LENGTH):
                decoder_output, decoder_hidden, attn_weights = self.forward_step(
                    decoder_input, decoder_hidden, encoder_outputs)
                decoder_outputs.append(decoder_output)
                attentions.append(attn_weights)
                if target_tensor is not None:
                    decoder_input = target_tensor[:, i].unsqueeze(1)  # Teacher forcing
                else:
                    _, topi = decoder_output.topk(1)
                    decoder_input = topi.squeeze(-1).detach()  # detach from history as input
            decoder_outputs = torch.cat(decoder_outputs, dim=1)
            decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
            attentions = torch.cat(attentions, dim=1)
            return decoder_outputs, decoder_hidden, attentions

        def forward_step(self, input, hidden, encoder_outputs):
            embedded = self.dropout(self.embedding(input))
            query = hidden.permute(1, 0, 2)
            context, attn_weights = self.attention(query, encoder_outputs)
            input_gru = torch.cat((embedded, context), dim=2)
            output, hidden = self.gru(input_gru, hidden)
            output = self.out(output)
            return output, hidden, attn_weights

    def indexesFromSentence(lang, sentence):
        return [lang.word2index[word] for word in sentence.split(' ')]

    def tensorFromSentence(lang, sentence):
        indexes = indexesFromSentence(lang, sentence)
        indexes.append(EOS_token)
        return torch.tensor(indexes, dtype=torch.long, device=device).view(1, -1)

    def get_dataloader(batch_size):
        n = len(pairs)
        input_ids = np.zeros((n, MAX_LENGTH), dtype=np.int32)
        target_ids = np.zeros((n, MAX_LENGTH), dtype=np.int32)
        for idx, (inp, tgt) in enumerate(pairs):
            inp_ids = indexesFromSentence(input_lang, inp)
            tgt_ids = indexesFromSentence(output_lang, tgt)
            inp_ids.append(EOS_token)
            tgt_ids.append(EOS_token)
            input_ids[idx, :len(inp_ids)] = inp_ids
            target_ids[idx, :len(tgt_ids)] = tgt_ids
        train_data = TensorDataset(torch.LongTensor(input_ids).to(device), torch.LongTensor(target_ids).to(device))
        train_sampler = RandomSampler(train_data)
        train_dataloader = DataLoader(train_data, sampler=train_sampler, batch_size=batch_size)
        return input_lang, output_lang, train_dataloader

    def train_epoch(dataloader, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion):
        total_loss = 0
        for data in dataloader:
            input_tensor, target_tensor = data
            encoder_optimizer.zero_grad()
            decoder_optimizer.zero_grad()
            encoder_outputs, encoder_hidden = encoder(input_tensor)
            decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)
            loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
            loss.backward()
            encoder_optimizer.step()
            decoder_optimizer.step()
            total_loss += loss.item()
        return total_loss / len(dataloader)

    def train(train_dataloader, encoder, decoder, n_epochs, learning_rate=0.001):
        losses = []
        encoder_optimizer = optim.Adam(encoder.parameters(), lr=learning_rate)
        decoder_optimizer = optim.Adam(decoder.parameters(), lr=learning_rate)
        criterion = nn.NLLLoss()
        for epoch in range(1, n_epochs + 1):
            losses.append(train_epoch(train_dataloader, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion))
        return losses

    def evaluate(encoder, decoder, sentence, input_lang, output_lang):
        with torch.no_grad():
            input_tensor = tensorFromSentence(input_lang, sentence)
            encoder_outputs, encoder_hidden = encoder(input_tensor)
            decoder_outputs, decoder_hidden, decoder_attn = decoder(encoder_outputs, encoder_hidden)
            _, topi = decoder_outputs.topk(1)
            decoded_ids = topi.squeeze()
            decoded_words = []
            for idx in decoded_ids:
                if idx.item() == EOS_token:
                    decoded_words.append('<EOS>')
                    break
                decoded_words.append(output_lang.index2word[idx.item()])
        return decoded_words, decoder_attn

    torch.manual_seed(seed)
    input_lang, output_lang, train_dataloader = get_dataloader(batch_size)
    # The parity run feeds the batches in order (the two samplers' streams differ).
    if dropout is not None:
        train_dataloader = DataLoader(train_dataloader.dataset, batch_size=batch_size)
    encoder = _set_params(EncoderRNN(input_lang.n_words, hidden_size).to(device), seed + 1, dropout=dropout)
    decoder = _set_params(AttnDecoderRNN(hidden_size, output_lang.n_words).to(device), seed + 2, dropout=dropout)
    losses = train(train_dataloader, encoder, decoder, n_epochs, learning_rate=0.01)
    encoder.eval()
    decoder.eval()
    translations, attn_shapes, attn_sums = [], [], []
    for src, _ in pairs:
        words, attn = evaluate(encoder, decoder, src, input_lang, output_lang)
        translations.append(' '.join(words))
        attn_shapes.append(tuple(attn.shape))
        attn_sums.append(npy(attn.sum(-1)))
    return dict(losses=losses, translations=translations, attn_shapes=attn_shapes, attn_sums=attn_sums,
                n_words=(input_lang.n_words, output_lang.n_words))


def test_seq2seq_translation():
    out = seq2seq_translation(lucid, n_epochs=100)
    assert out["n_words"] == (14, 13)
    assert out["losses"][-1] < 0.3 * out["losses"][0]
    assert out["attn_shapes"] == [(1, MAX_LENGTH, 4)] * 6 + [(1, MAX_LENGTH, 4)] * 2
    for s in out["attn_sums"]:
        np.testing.assert_allclose(s, 1.0, rtol=1e-5)
    right = sum(t == tgt + " <EOS>" for t, (_, tgt) in zip(out["translations"], _PAIRS))
    assert right >= 7, out["translations"]


def test_seq2seq_translation_torch_parity():
    torch = pytest.importorskip("torch")
    lo = seq2seq_translation(lucid, n_epochs=4, dropout=0.0)
    to = seq2seq_translation(torch, n_epochs=4, dropout=0.0)
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-4)
    assert lo["translations"] == to["translations"]
    for a, b in zip(lo["attn_sums"], to["attn_sums"]):
        np.testing.assert_allclose(a, b, rtol=1e-5)


# ---------------------------------------------------------- Language Modeling with nn.Transformer

def transformer_lm(torch, tmpdir, epochs=3, seed=0, dropout=0.2, bptt=8):
    import os
    nn = torch.nn
    from importlib import import_module
    TransformerEncoder = nn.TransformerEncoder
    TransformerEncoderLayer = nn.TransformerEncoderLayer
    device = torch.empty(0).device

    class TransformerModel(nn.Module):
        def __init__(self, ntoken, d_model, nhead, d_hid, nlayers, dropout=0.5):
            super().__init__()
            self.model_type = 'Transformer'
            self.pos_encoder = PositionalEncoding(d_model, dropout)
            encoder_layers = TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
            self.transformer_encoder = TransformerEncoder(encoder_layers, nlayers)
            self.embedding = nn.Embedding(ntoken, d_model)
            self.d_model = d_model
            self.linear = nn.Linear(d_model, ntoken)
            self.init_weights()

        def init_weights(self):
            initrange = 0.1
            self.embedding.weight.data.uniform_(-initrange, initrange)
            self.linear.bias.data.zero_()
            self.linear.weight.data.uniform_(-initrange, initrange)

        def forward(self, src, src_mask=None):
            src = self.embedding(src) * math.sqrt(self.d_model)
            src = self.pos_encoder(src)
            if src_mask is None:
                src_mask = nn.Transformer.generate_square_subsequent_mask(len(src)).to(device)
            output = self.transformer_encoder(src, src_mask)
            output = self.linear(output)
            return output

    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, dropout=0.1, max_len=5000):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            position = torch.arange(max_len).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            pe = torch.zeros(max_len, 1, d_model)
            pe[:, 0, 0::2] = torch.sin(position * div_term)
            pe[:, 0, 1::2] = torch.cos(position * div_term)
            self.register_buffer('pe', pe)

        def forward(self, x):
            x = x + self.pe[:x.size(0)]
            return self.dropout(x)

    # A synthetic corpus: a repeating pattern of 12 "words" with noise, in place of WikiText2.
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(12)]
    vocab = {w: i for i, w in enumerate(["<unk>"] + words)}

    def tokenizer(line):
        return line.split()

    def raw(n):
        return [" ".join(words[(j + int(rng.integers(0, 2))) % 12] for j in range(k * 5, k * 5 + 5)) if k % 7 else ""
                for k in range(n)]

    def data_process(raw_text_iter):
        data = [torch.tensor([vocab[t] for t in tokenizer(item)], dtype=torch.long) for item in raw_text_iter]
        return torch.cat(tuple(filter(lambda t: t.numel() > 0, data)))

    train_data, val_data = data_process(raw(60)), data_process(raw(20))

    def batchify(data, bsz):
        seq_len = data.size(0) // bsz
        data = data[:seq_len * bsz]
        data = data.view(bsz, seq_len).t().contiguous()
        return data.to(device)

    batch_size, eval_batch_size = 4, 2
    train_data = batchify(train_data, batch_size)
    val_data = batchify(val_data, eval_batch_size)

    def get_batch(source, i):
        seq_len = min(bptt, len(source) - 1 - i)
        data = source[i:i + seq_len]
        target = source[i + 1:i + 1 + seq_len].reshape(-1)
        return data, target

    ntokens = len(vocab)
    emsize, d_hid, nlayers, nhead = 16, 32, 2, 2
    torch.manual_seed(seed)
    model = TransformerModel(ntokens, emsize, nhead, d_hid, nlayers, dropout).to(device)
    if dropout == 0.0:
        _set_params(model, seed + 1, scale=0.15)

    criterion = nn.CrossEntropyLoss()
    lr = 1.0
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.95)

    def train(model):
        model.train()
        total_loss = 0.
        num_batches = len(train_data) // bptt
        for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
            data, targets = get_batch(train_data, i)
            output = model(data)
            output_flat = output.view(-1, ntokens)
            loss = criterion(output_flat, targets)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            total_loss += loss.item()
        return total_loss / (batch + 1), num_batches

    def evaluate(model, eval_data):
        model.eval()
        total_loss = 0.
        with torch.no_grad():
            for i in range(0, eval_data.size(0) - 1, bptt):
                data, targets = get_batch(eval_data, i)
                seq_len = data.size(0)
                output = model(data)
                output_flat = output.view(-1, ntokens)
                total_loss += seq_len * criterion(output_flat, targets).item()
        return total_loss / (len(eval_data) - 1)

    best_val_loss = float('inf')
    best_model_params_path = os.path.join(tmpdir, "best_model_params.pt")
    train_losses, val_losses, lrs = [], [], []
    for epoch in range(1, epochs + 1):
        tl, num_batches = train(model)
        train_losses.append(tl)
        val_loss = evaluate(model, val_data)
        val_losses.append(val_loss)
        lrs.append(scheduler.get_last_lr()[0])
        if val_loss < best_val_loss:
            best_val_loss = val_loss
            torch.save(model.state_dict(), best_model_params_path)
        scheduler.step()
    model.load_state_dict(torch.load(best_model_params_path))  # load best model states
    test_loss = evaluate(model, val_data)
    mask = nn.Transformer.generate_square_subsequent_mask(3)
    return dict(train=train_losses, val=val_losses, lrs=lrs, best=best_val_loss, test=test_loss,
                mask=npy(mask), shapes=(tuple(train_data.shape), tuple(val_data.shape)), num_batches=num_batches)


def test_transformer_language_model(tmp_path):
    lucid.manual_seed(0)
    out = transformer_lm(lucid, str(tmp_path), epochs=4)
    assert out["shapes"] == ((51 * 5 // 4, 4), (17 * 5 // 2, 2))  # 9 and 3 empty lines filtered out
    assert out["mask"].tolist() == [[0.0, -np.inf, -np.inf], [0.0, 0.0, -np.inf], [0.0, 0.0, 0.0]]
    np.testing.assert_allclose(out["lrs"], [0.95 ** k for k in range(4)], rtol=1e-12)
    assert out["train"][-1] < 0.8 * out["train"][0]
    assert out["val"][-1] < out["val"][0]
    assert out["test"] == pytest.approx(out["best"], rel=1e-6)
    assert out["best"] == min(out["val"])


def test_transformer_language_model_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    lo = transformer_lm(lucid, str(tmp_path / "l"), epochs=2, dropout=0.0)
    to = transformer_lm(torch, str(tmp_path / "t"), epochs=2, dropout=0.0)
    assert lo["shapes"] == to["shapes"] and lo["num_batches"] == to["num_batches"]
    np.testing.assert_allclose(lo["train"], to["train"], rtol=1e-4)
    np.testing.assert_allclose(lo["val"], to["val"], rtol=1e-4)
    np.testing.assert_allclose(lo["test"], to["test"], rtol=1e-4)
    np.testing.assert_array_equal(lo["mask"], to["mask"])
