"""PyTorch's "(Beta) Implementing High-Performance Transformers with Scaled Dot Product Attention"
and "Getting Started with Nested Tensors" run on Lucid (``import lucid as torch``): SDPA on
dense inputs, ``sdpa_kernel``/``SDPBackend`` (Lucid has the math kernel only, so the fused ones
raise ``RuntimeError`` as PyTorch does where they cannot run), the ``CausalSelfAttention``
module, nested (jagged) inputs through it, the ``causal_upper_left``/``causal_lower_right``
biases with their backward; then nested tensors: construction, padding, ops, and the page's
``MultiHeadAttention`` over nested inputs against the same module run on each sequence alone.
Sizes are shrunk (the benchmarks become value checks); fp16/CUDA becomes float32 on the
default device.

Each page is a function of the module it is handed as ``torch``; the parity tests run the same
text on PyTorch where it is installed, from the same NumPy-drawn weights and inputs.
"""
import numpy as np
import pytest

import lucid
import lucid.nested  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.nn.attention.bias  # noqa: F401
import lucid.nn.functional  # noqa: F401


def _set_params(torch, model, seed):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.normal(scale=0.3, size=tuple(p.shape)), dtype=p.dtype))
    return model


def _rand(torch, seed, *shape):
    return torch.tensor(np.random.default_rng(seed).normal(size=shape).astype(np.float32))


def _ref_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d) + mask) v in float64 NumPy; ``mask`` True where allowed."""
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


# -------------------------------------------------------------- Scaled Dot Product Attention

def sdpa_tutorial(torch):
    F, nn = torch.nn.functional, torch.nn
    from importlib import import_module
    attention = import_module(torch.__name__ + ".nn.attention")
    bias_mod = import_module(torch.__name__ + ".nn.attention.bias")
    SDPBackend, sdpa_kernel = attention.SDPBackend, attention.sdpa_kernel
    out = {}

    # Example usage
    query, key, value = _rand(torch, 0, 2, 3, 8), _rand(torch, 1, 2, 3, 8), _rand(torch, 2, 2, 3, 8)
    out["qkv"] = [t.numpy() for t in (query, key, value)]
    out["basic"] = F.scaled_dot_product_attention(query, key, value).numpy()

    # Explicit dispatcher control: the math kernel runs; the fused ones are unavailable here
    with sdpa_kernel(SDPBackend.MATH):
        out["math"] = F.scaled_dot_product_attention(query, key, value).numpy()
    out["fused"] = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        with sdpa_kernel(backend):
            try:
                F.scaled_dot_product_attention(query, key, value)
                out["fused"].append("ran")
            except RuntimeError:
                out["fused"].append("RuntimeError")

    # Causal Self Attention
    class CausalSelfAttention(nn.Module):

        def __init__(self, num_heads: int, embed_dimension: int, bias: bool = False, is_causal: bool = False,
                     dropout: float = 0.0):
            super().__init__()
            assert embed_dimension % num_heads == 0
            # key, query, value projections for all heads, but in a batch
            self.c_attn = nn.Linear(embed_dimension, 3 * embed_dimension, bias=bias)
            # output projection
            self.c_proj = nn.Linear(embed_dimension, embed_dimension, bias=bias)
            # regularization
            self.dropout = dropout
            self.resid_dropout = nn.Dropout(dropout)
            self.num_heads = num_heads
            self.embed_dimension = embed_dimension
            # Perform causal masking
            self.is_causal = is_causal

        def forward(self, x):
            # calculate query, key, values for all heads in batch and move head forward to be the batch dim
            query_projected = self.c_attn(x)

            batch_size = query_projected.size(0)
            embed_dim = query_projected.size(2)
            head_dim = embed_dim // (self.num_heads * 3)

            query, key, value = query_projected.chunk(3, -1)
            query = query.view(batch_size, -1, self.num_heads, head_dim).transpose(1, 2)
            key = key.view(batch_size, -1, self.num_heads, head_dim).transpose(1, 2)
            value = value.view(batch_size, -1, self.num_heads, head_dim).transpose(1, 2)

            if self.training:
                dropout = self.dropout
                is_causal = self.is_causal
            else:
                dropout = 0.0
                is_causal = False

            y = F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=dropout,
                                               is_causal=is_causal)
            y = y.transpose(1, 2).view(batch_size, -1, self.num_heads * head_dim)

            y = self.resid_dropout(self.c_proj(y))
            return y

    num_heads = 2
    heads_per_dim = 4
    embed_dimension = num_heads * heads_per_dim
    model = CausalSelfAttention(num_heads=num_heads, embed_dimension=embed_dimension, bias=False, is_causal=True,
                                dropout=0.1).eval()
    _set_params(torch, model, 3)
    out["model_repr"] = [type(m).__name__ for m in model.modules()]
    x = _rand(torch, 4, 3, 5, embed_dimension)
    out["x"] = x.numpy()
    out["weights"] = (model.c_attn.weight.detach().numpy(), model.c_proj.weight.detach().numpy())
    out["eval"] = model(x).detach().numpy()
    model.train()
    model.dropout = 0.0  # the training path without dropout's randomness: causal attention
    model.resid_dropout.p = 0.0
    out["train_causal"] = model(x).detach().numpy()
    model.eval()

    # NestedTensor and Dense tensor support
    seq_len_list = [5, 2, 4]
    rng = np.random.default_rng(5)
    random_nt = torch.nested.nested_tensor(
        [torch.tensor(rng.normal(size=(seq_len, embed_dimension)).astype(np.float32)) for seq_len in seq_len_list],
        layout=torch.jagged)
    model.requires_grad_(False)
    try:
        nt_out = model(random_nt)
    except RuntimeError:  # PyTorch on the CPU: no kernel takes these chunked, transposed nested views
        out["nt"] = None
    else:
        out["nt"] = (nt_out.is_nested, [tuple(t.shape) for t in nt_out.unbind()])
        out["nt_rows"] = [t.numpy() for t in nt_out.unbind()]
        out["nt_alone"] = [model(t.unsqueeze(0))[0].numpy() for t in random_nt.unbind()]

    # Using SDPA with attn_bias subclasses
    batch_size, sequence_length_q, sequence_length_kv, num_heads, embed_dimension = 2, 2, 6, 2, 4
    q = _rand(torch, 6, batch_size, num_heads, sequence_length_q, embed_dimension).requires_grad_()
    k = _rand(torch, 7, batch_size, num_heads, sequence_length_kv, embed_dimension)
    v = _rand(torch, 8, batch_size, num_heads, sequence_length_kv, embed_dimension)
    upper_left_bias = bias_mod.causal_upper_left(sequence_length_q, sequence_length_kv)
    lower_right_bias = bias_mod.causal_lower_right(sequence_length_q, sequence_length_kv)
    assert type(upper_left_bias) == type(lower_right_bias)
    out["bias_is_tensor"] = issubclass(type(upper_left_bias), torch.Tensor)
    out["bias_masks"] = (upper_left_bias._materialize().tolist(), lower_right_bias._materialize().tolist())

    out_upper_left = F.scaled_dot_product_attention(q, k, v, upper_left_bias)
    out_lower_right = F.scaled_dot_product_attention(q, k, v, lower_right_bias)
    out_is_causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out["bias_checks"] = (torch.allclose(out_upper_left, out_is_causal),
                          not torch.allclose(out_upper_left, out_lower_right))
    out["bias_qkv"] = [t.detach().numpy() for t in (q, k, v)]
    out["bias_outs"] = (out_upper_left.detach().numpy(), out_lower_right.detach().numpy())
    # These operations also support backward
    out_upper_left.sum().backward()
    out["bias_grad_ul"] = q.grad.numpy().copy()
    q.grad = None
    out_lower_right.sum().backward()
    out["bias_grad_lr"] = q.grad.numpy().copy()
    return out


def test_sdpa_tutorial():
    out = sdpa_tutorial(lucid)
    q, k, v = out["qkv"]
    np.testing.assert_allclose(out["basic"], _ref_attention(q, k, v), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["math"], out["basic"])
    assert out["fused"] == ["RuntimeError", "RuntimeError"]  # as PyTorch where no fused kernel can run
    assert out["model_repr"] == ["CausalSelfAttention", "Linear", "Linear", "Dropout"]

    x = out["x"].astype(np.float64)
    wa, wp = (w.astype(np.float64) for w in out["weights"])

    def reference(x, causal):
        qp, kp, vp = np.split(x @ wa.T, 3, -1)
        heads = [t.reshape(t.shape[0], -1, 2, 4).transpose(0, 2, 1, 3) for t in (qp, kp, vp)]
        n = x.shape[1]
        y = _ref_attention(*heads, np.tril(np.ones((n, n), bool)) if causal else None)
        return y.transpose(0, 2, 1, 3).reshape(x.shape[0], n, 8) @ wp.T

    np.testing.assert_allclose(out["eval"], reference(x, False), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["train_causal"], reference(x, True), rtol=1e-4, atol=1e-5)
    # nested input: each sequence attends to itself alone
    assert out["nt"] == (True, [(5, 8), (2, 8), (4, 8)])
    for row, alone in zip(out["nt_rows"], out["nt_alone"]):
        np.testing.assert_allclose(row, alone, rtol=1e-5, atol=1e-6)

    ul, lr = out["bias_masks"]
    assert ul == np.tril(np.ones((2, 6), bool)).tolist() and lr == np.tril(np.ones((2, 6), bool), 4).tolist()
    assert out["bias_checks"] == (True, True)
    q, k, v = out["bias_qkv"]
    np.testing.assert_allclose(out["bias_outs"][0], _ref_attention(q, k, v, np.array(ul)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["bias_outs"][1], _ref_attention(q, k, v, np.array(lr)), rtol=1e-5, atol=1e-6)
    # d sum(softmax(s) v)/dq by central differences in float64 through the reference
    for mask, grad in ((np.array(ul), out["bias_grad_ul"]), (np.array(lr), out["bias_grad_lr"])):
        q64, fd, eps = q.astype(np.float64), np.zeros(q.shape), 1e-6
        for idx in np.ndindex(*q.shape):
            d = np.zeros(q.shape)
            d[idx] = eps
            fd[idx] = (_ref_attention(q64 + d, k, v, mask).sum()
                       - _ref_attention(q64 - d, k, v, mask).sum()) / (2 * eps)
        np.testing.assert_allclose(grad, fd, rtol=1e-3, atol=1e-5)


def test_causal_bias_is_a_plain_object_by_design():
    # The page asserts ``issubclass(type(upper_left_bias), torch.Tensor)``; Lucid's CausalBias is a
    # plain object that scaled_dot_product_attention recognises (README "Differences",
    # lucid/nn/attention/bias.py): the protocol stays off for programs that use it.
    bias = lucid.nn.attention.bias.causal_upper_left(2, 6)
    assert not issubclass(type(bias), lucid.Tensor)
    assert bias._materialize().tolist() == np.tril(np.ones((2, 6), bool)).tolist()


def test_sdpa_output_keeps_the_query_layout():  # it was always contiguous (B, H, L, E) before (fixed)
    # The page's ``y.transpose(1, 2).view(B, -1, H * E)`` after attention over heads split from
    # a (B, L, H * E) projection: PyTorch's kernels (CPU flash, CUDA flash/efficient) give the
    # output the query's memory layout, so the view works there.
    q = lucid.randn(3, 5, 2, 4).transpose(1, 2)
    y = lucid.nn.functional.scaled_dot_product_attention(q, q, q)
    assert tuple(y.transpose(1, 2).view(3, -1, 8).shape) == (3, 5, 8)


def test_sdpa_tutorial_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = sdpa_tutorial(lucid), sdpa_tutorial(torch)
    for k in ("fused", "bias_masks", "bias_checks"):
        assert lo[k] == to[k], k
    for k in ("basic", "math", "eval", "train_causal", "bias_outs", "bias_grad_ul", "bias_grad_lr"):
        np.testing.assert_allclose(lo[k], to[k], rtol=1e-4, atol=1e-6, err_msg=k)
    if to["nt"] is not None:  # PyTorch runs nested SDPA only on CUDA here (None on the CPU)
        assert lo["nt"] == to["nt"]
        for a, b in zip(lo["nt_rows"], to["nt_rows"]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- Getting Started with Nested Tensors

def nested_tutorial(torch, N=6, E=8, nheads=2):
    nn, F = torch.nn, torch.nn.functional
    out = {}

    # Nested tensor initialization and conversion
    nt = torch.nested.nested_tensor([torch.arange(12).reshape(2, 6), torch.arange(18).reshape(3, 6)],
                                    dtype=torch.float, layout=torch.jagged)
    out["nt"] = (nt.is_nested, nt.dim(), nt.size(0), nt.shape[-1], str(nt.dtype).split(".")[-1],
                 [t.tolist() for t in nt.unbind()])
    padded_out_tensor = torch.nested.to_padded_tensor(nt, padding=0.0)
    out["padded"] = padded_out_tensor.tolist()
    out["padded_method"] = nt.to_padded_tensor(-1.0).tolist()

    # Nested tensor operations
    w = torch.tensor(np.arange(24.0).reshape(4, 6) / 10, dtype=torch.float)
    out["linear"] = [t.tolist() for t in F.linear(nt, w).unbind()]
    out["softmax"] = [t.numpy() for t in F.softmax(nt / 5, -1).unbind()]
    heads = nt.unflatten(-1, [2, 3]).transpose(1, 2)
    out["heads"] = [tuple(t.shape) for t in heads.unbind()]
    out["heads_back"] = [t.tolist() for t in heads.transpose(1, 2).flatten(-2).unbind()]
    out["chunk"] = [[t.tolist() for t in c.unbind()] for c in torch.chunk(nt, 3, dim=-1)]
    out["pointwise"] = [t.tolist() for t in (nt * 2 + 1).relu().unbind()]
    out["sum_last"] = [t.tolist() for t in nt.sum(-1).unbind()]

    # MultiHeadAttention over nested inputs (the page's module)
    class MultiHeadAttention(nn.Module):
        def __init__(self, E_q, E_k, E_v, E_total, nheads, dropout=0.0, bias=True, device=None, dtype=None):
            factory_kwargs = {"device": device, "dtype": dtype}
            super().__init__()
            self.nheads = nheads
            self.dropout = dropout
            self._qkv_same_embed_dim = E_q == E_k and E_q == E_v
            if self._qkv_same_embed_dim:
                self.packed_proj = nn.Linear(E_q, E_total * 3, bias=bias, **factory_kwargs)
            else:
                self.q_proj = nn.Linear(E_q, E_total, bias=bias, **factory_kwargs)
                self.k_proj = nn.Linear(E_k, E_total, bias=bias, **factory_kwargs)
                self.v_proj = nn.Linear(E_v, E_total, bias=bias, **factory_kwargs)
            E_out = E_q
            self.out_proj = nn.Linear(E_total, E_out, bias=bias, **factory_kwargs)
            assert E_total % nheads == 0, "Embedding dim is not divisible by nheads"
            self.E_head = E_total // nheads
            self.bias = bias

        def forward(self, query, key, value, attn_mask=None, is_causal=False):
            # Step 1. Apply input projection
            if self._qkv_same_embed_dim:
                if query is key and key is value:
                    result = self.packed_proj(query)
                    query, key, value = torch.chunk(result, 3, dim=-1)
                else:
                    q_weight, k_weight, v_weight = torch.chunk(self.packed_proj.weight, 3, dim=0)
                    if self.bias:
                        q_bias, k_bias, v_bias = torch.chunk(self.packed_proj.bias, 3, dim=0)
                    else:
                        q_bias, k_bias, v_bias = None, None, None
                    query, key, value = (F.linear(query, q_weight, q_bias), F.linear(key, k_weight, k_bias),
                                         F.linear(value, v_weight, v_bias))
            else:
                query = self.q_proj(query)
                key = self.k_proj(key)
                value = self.v_proj(value)

            # Step 2. Split heads and prepare for SDPA
            query = query.unflatten(-1, [self.nheads, self.E_head]).transpose(1, 2)
            key = key.unflatten(-1, [self.nheads, self.E_head]).transpose(1, 2)
            value = value.unflatten(-1, [self.nheads, self.E_head]).transpose(1, 2)

            # Step 3. Run SDPA
            attn_output = F.scaled_dot_product_attention(query, key, value, dropout_p=self.dropout,
                                                         is_causal=is_causal)
            attn_output = attn_output.transpose(1, 2).flatten(-2)

            # Step 4. Apply output projection
            attn_output = self.out_proj(attn_output)
            return attn_output

    def zipf_sentence_lengths(alpha: float, batch_size: int):
        # generate fake corpus by unigram Zipf distribution (a seeded NumPy stream here)
        rng = np.random.default_rng(0)
        sentence_lengths = np.empty(batch_size, dtype=int)
        for ibatch in range(batch_size):
            sentence_lengths[ibatch] = 1
            word = rng.zipf(alpha)
            while word != 3 and word != 386 and word != 858 and sentence_lengths[ibatch] < 12:
                sentence_lengths[ibatch] += 1
                word = rng.zipf(alpha)
        return torch.tensor(sentence_lengths)

    def gen_batch(N, E_q, E_k, E_v, dtype=torch.float32):
        sentence_lengths = zipf_sentence_lengths(alpha=1.2, batch_size=N)
        rng = np.random.default_rng(1)
        query, key, value = (torch.nested.nested_tensor(
            [torch.tensor(rng.normal(size=(int(l.item()), e)).astype(np.float32), dtype=dtype)
             for l in sentence_lengths], layout=torch.jagged) for e in (E_q, E_k, E_v))
        return query, key, value, sentence_lengths

    query, key, value, sentence_lengths = gen_batch(N, E, E, E)
    out["lengths"] = sentence_lengths.tolist()
    mha = _set_params(torch, MultiHeadAttention(E, E, E, E, nheads), 9)
    padded_query, padded_key, padded_value = (t.to_padded_tensor(0.0) for t in (query, key, value))

    def run(q, k, v, is_causal):
        try:
            return mha(q, k, v, is_causal=is_causal)
        except RuntimeError:  # PyTorch on the CPU: no kernel for these nested views
            return None

    nested_result = run(query, key, value, True)
    padded_result = mha(padded_query, padded_key, padded_value, is_causal=True)
    with torch.no_grad():  # padding-specific step: zero the padded rows (they hold the bias)
        for i, entry_length in enumerate(sentence_lengths):
            padded_result[i, entry_length:, :] = 0.0
    out["padded_result"] = padded_result.detach().numpy()
    out["nested_result"] = None if nested_result is None else nested_result.to_padded_tensor(0.0).detach().numpy()
    out["self_attention"] = None
    res = run(query, query, query, False)  # the packed projection path (query is key is value)
    if res is not None:
        out["self_attention"] = [t.detach().numpy() for t in res.unbind()]
        out["self_alone"] = [mha(t[None], t[None], t[None])[0].detach().numpy() for t in query.unbind()]
        res.values().sum().backward()
        out["grad_packed"] = mha.packed_proj.weight.grad.numpy().copy()
        mha.zero_grad()
        sum(mha(t[None], t[None], t[None]).sum() for t in query.unbind()).backward()
        out["grad_packed_alone"] = mha.packed_proj.weight.grad.numpy().copy()
    return out


def test_nested_tensors_tutorial():
    out = nested_tutorial(lucid)
    a, b = np.arange(12.0).reshape(2, 6), np.arange(18.0).reshape(3, 6)
    assert out["nt"] == (True, 3, 2, 6, "float32", [a.tolist(), b.tolist()])
    assert out["padded"] == [np.vstack([a, np.zeros((1, 6))]).tolist(), b.tolist()]
    assert out["padded_method"] == [np.vstack([a, -np.ones((1, 6))]).tolist(), b.tolist()]
    w = np.arange(24.0).reshape(4, 6) / 10
    np.testing.assert_allclose(np.vstack(out["linear"][0] + out["linear"][1]), np.vstack([a, b]) @ w.T, rtol=1e-6)
    for got, x in zip(out["softmax"], (a, b)):
        e = np.exp(x / 5 - (x / 5).max(-1, keepdims=True))
        np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5)
    assert out["heads"] == [(2, 2, 3), (2, 3, 3)] and out["heads_back"] == [a.tolist(), b.tolist()]
    assert out["chunk"] == [[a[:, 2 * i:2 * i + 2].tolist(), b[:, 2 * i:2 * i + 2].tolist()] for i in range(3)]
    assert out["pointwise"] == [(2 * a + 1).tolist(), (2 * b + 1).tolist()]
    assert out["sum_last"] == [a.sum(-1).tolist(), b.sum(-1).tolist()]
    # the page's check: causal attention over the nested batch equals the padded batch's
    assert len(out["lengths"]) == 6 and min(out["lengths"]) >= 1 and len(set(out["lengths"])) > 1
    np.testing.assert_allclose(out["nested_result"], out["padded_result"], rtol=1e-5, atol=1e-6)
    for got, alone in zip(out["self_attention"], out["self_alone"]):
        np.testing.assert_allclose(got, alone, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["grad_packed"], out["grad_packed_alone"], rtol=1e-4, atol=1e-5)


def test_nested_sdpa_key_and_value_built_apart():  # refused unless key and value shared offsets (fixed)
    rng = np.random.default_rng(0)
    q, k, v = (lucid.nested.nested_tensor([lucid.tensor(rng.normal(size=(n, 2, 8))) for n in (3, 5)],
                                          layout=lucid.jagged).transpose(1, 2) for _ in range(3))
    out = lucid.nn.functional.scaled_dot_product_attention(q, k, v)  # PyTorch runs this (CPU math kernel)
    for o, qi, ki, vi in zip(out.unbind(), q.unbind(), k.unbind(), v.unbind()):
        np.testing.assert_allclose(o.numpy(), _ref_attention(qi.numpy(), ki.numpy(), vi.numpy()), rtol=1e-10)


def test_nested_tensors_tutorial_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = nested_tutorial(lucid), nested_tutorial(torch)
    np.testing.assert_allclose(np.vstack(lo["linear"][0] + lo["linear"][1]),
                               np.vstack(to["linear"][0] + to["linear"][1]), rtol=1e-6)
    for k in ("nt", "padded", "padded_method", "heads", "heads_back", "chunk", "pointwise", "sum_last",
              "lengths"):
        assert lo[k] == to[k], k
    for a, b in zip(lo["softmax"], to["softmax"]):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    np.testing.assert_allclose(lo["padded_result"], to["padded_result"], rtol=1e-4, atol=1e-6)
    if to["nested_result"] is not None:  # PyTorch's nested SDPA runs on CUDA only for these views
        np.testing.assert_allclose(lo["nested_result"], to["nested_result"], rtol=1e-4, atol=1e-6)
