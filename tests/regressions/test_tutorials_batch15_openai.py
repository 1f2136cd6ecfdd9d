"""openai/whisper and openai/CLIP run on Lucid (``import lucid as torch``), fifteenth batch:

- openai/whisper ``whisper/model.py``: ``ModelDimensions``, the ``LayerNorm``/``Linear``/``Conv1d``
  subclasses that cast to the input's dtype, ``sinusoids``, ``disable_sdpa``,
  ``MultiHeadAttention.qkv_attention`` (the ``scaled_dot_product_attention`` path with
  ``is_causal`` and the manual ``(q * scale) @ (k * scale).transpose(-1, -2)`` path),
  ``ResidualAttentionBlock``, ``AudioEncoder``, ``TextDecoder`` (its ``-inf``/``triu_`` causal mask
  buffer, ``persistent=False``), ``Whisper`` (the ``alignment_heads`` sparse buffer,
  ``embed_audio``, ``logits``, ``install_kv_cache_hooks``: forward hooks on the key/value
  projections whose return value replaces the output, a dict keyed by modules;
  ``set_alignment_heads``: a b85/gzip dump to a sparse buffer).
  ``whisper/audio.py``: ``pad_or_trim`` (tensor and NumPy branches), ``mel_filters`` and
  ``log_mel_spectrogram`` (``torch.stft`` with a Hann window, ``return_complex=True``,
  ``.abs() ** 2``, ``clamp(min=1e-10).log10()``, ``torch.maximum`` with ``max() - 8``).
  ``whisper/decoding.py``: ``DecodingOptions``, ``DecodingResult``, ``PyTorchInference`` (the kv
  cache through the hooks, ``rearrange_kv_cache``), ``MaximumLikelihoodRanker``,
  ``GreedyDecoder.update/finalize`` (argmax, and ``Categorical`` sampling at a temperature),
  ``BeamSearchDecoder`` (``topk`` over each beam, ``np.argsort`` of a tensor in ``finalize``), the
  logit filters ``SuppressBlank``, ``SuppressTokens``, ``ApplyTimestampRules`` and
  ``DecodingTask`` (``_main_loop``, ``run``) with ``utils.compression_ratio``; decoded in float32
  and with the default ``fp16=True`` (``mel.half()`` through float32 weights, cast by the
  subclasses). Checked against a full recompute without the cache, replayed in NumPy.
  ``whisper/timing.py``: ``median_filter`` (reflect ``F.pad``, ``unfold``, ``sort``), ``dtw_cpu``
  and ``backtrace`` (numba's jit dropped), ``find_alignment`` (forward hooks on the cross
  attention saving the manual path's scores under ``disable_sdpa``, ``alignment_heads.indices().T``
  indexing a list, ``std_mean``, ``mean(axis=0)``).
- openai/CLIP ``clip/model.py``: ``Bottleneck``, ``AttentionPool2d``
  (``F.multi_head_attention_forward`` with separate q/k/v projection weights),
  ``ModifiedResNet``, the fp16 ``LayerNorm``, ``QuickGELU``, ``ResidualAttentionBlock``
  (``nn.MultiheadAttention`` with an additive ``attn_mask``), ``Transformer``,
  ``VisionTransformer``, ``CLIP`` (``encode_image``, ``encode_text``, ``forward``),
  ``convert_weights`` and ``build_model`` (the architecture read back from a state dict, loaded in
  float16), both the ViT and the ResNet towers; a few Adam steps on the symmetric contrastive loss
  of the CLIP paper's pseudo-code.

Sizes tiny, data synthetic; every page is a function of the module handed in as ``torch``, and
the parity tests run the same text on PyTorch with the same weights (set from NumPy by
``_set_params`` by parameter name).

Adapted: Whisper's ``mel_filters`` loads ``assets/mel_filters.npz`` (saved from
``librosa.filters.mel(sr=16000, n_fft=400, n_mels=80)``); that asset is not here, so the
filterbank is built in NumPy from librosa's formula (Slaney mel scale, Slaney area
normalisation) by ``_librosa_mel``. The tokenizer is a stand-in with Whisper's special-token
layout on a 36-token vocabulary (20 text tokens, eot, sot, ..., 8 timestamps); ``DecodingTask``
takes it as an argument instead of ``get_tokenizer`` and ``_get_audio_features`` is used with
``fp16=False`` as well as the default ``True``; ``decode`` takes the tokenizer too. The
decoding module's ``detect_language``, timing's Triton kernels and ``add_word_timestamps``, and
the model's ``transcribe`` bindings are left out; ``find_alignment`` runs under ``disable_sdpa()``
as upstream's current text does. ``build_model``'s ``transformer_heads = width // 64`` and CLIP's
``vision_heads`` fix widths of 64 (one head) for the tiny models. The beam-search parity runs
without timestamps: with them the first step allows only ``<|0.00|>``, and the second beam is a
``topk`` tie among ``-inf`` scores that the two libraries break differently.

Fixed on the way: ``nn.Conv1d/2d/3d.forward`` did not go through ``_conv_forward(input, weight,
bias)``, PyTorch's override point, so Whisper's ``Conv1d`` (casting the weight to the input's
dtype) was silently skipped: float32 weights with a float32 input hid it, and the default
``fp16=True`` decoding raised "conv1d: input type (lucid.float16) and weight type
(lucid.float32) should be the same" (``test_conv_forward_is_the_override_point``).
"""
import base64
import gzip
import math
import zlib
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import import_module
from types import SimpleNamespace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


def _set_params(torch, module, seed, keep=()):
    """Deterministic weights from NumPy, the same in both libraries: matrices ~ N(0, 1/fan_in),
    1-D weights ~ 1 + 0.1 N, other 1-D parameters ~ 0.1 N; names in ``keep`` are left alone."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name in keep:
                continue
            shape = tuple(p.shape)
            if len(shape) > 1:
                v = rng.standard_normal(shape) / math.sqrt(int(np.prod(shape[1:])))
            elif name.split(".")[-1] == "weight":
                v = 1 + 0.1 * rng.standard_normal(shape)
            else:
                v = 0.1 * rng.standard_normal(shape)
            p.copy_(torch.tensor(v, dtype=p.dtype))


def _np(t):
    return t.detach().cpu().float().numpy() if t.dtype.is_floating_point else t.detach().cpu().numpy()


# ---------------------------------------------------------------------------------------------
# whisper/model.py


def whisper_model_page(torch):
    nn = torch.nn
    F = torch.nn.functional
    Tensor = torch.Tensor

    try:
        scaled_dot_product_attention = import_module(torch.__name__ + ".nn.functional").scaled_dot_product_attention

        SDPA_AVAILABLE = True
    except (ImportError, RuntimeError, OSError, AttributeError):
        scaled_dot_product_attention = None
        SDPA_AVAILABLE = False

    @dataclass
    class ModelDimensions:
        n_mels: int
        n_audio_ctx: int
        n_audio_state: int
        n_audio_head: int
        n_audio_layer: int
        n_vocab: int
        n_text_ctx: int
        n_text_state: int
        n_text_head: int
        n_text_layer: int

    class LayerNorm(nn.LayerNorm):
        def forward(self, x: Tensor) -> Tensor:
            return super().forward(x.float()).type(x.dtype)

    class Linear(nn.Linear):
        def forward(self, x: Tensor) -> Tensor:
            return F.linear(
                x,
                self.weight.to(x.dtype),
                None if self.bias is None else self.bias.to(x.dtype),
            )

    class Conv1d(nn.Conv1d):
        def _conv_forward(
            self, x: Tensor, weight: Tensor, bias: Optional[Tensor]
        ) -> Tensor:
            return super()._conv_forward(
                x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype)
            )

    def sinusoids(length, channels, max_timescale=10000):
        """Returns sinusoids for positional embedding"""
        assert channels % 2 == 0
        log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)
        inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
        scaled_time = torch.arange(length)[:, np.newaxis] * inv_timescales[np.newaxis, :]
        return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)

    @contextmanager
    def disable_sdpa():
        prev_state = MultiHeadAttention.use_sdpa
        try:
            MultiHeadAttention.use_sdpa = False
            yield
        finally:
            MultiHeadAttention.use_sdpa = prev_state

    class MultiHeadAttention(nn.Module):
        use_sdpa = True

        def __init__(self, n_state: int, n_head: int):
            super().__init__()
            self.n_head = n_head
            self.query = Linear(n_state, n_state)
            self.key = Linear(n_state, n_state, bias=False)
            self.value = Linear(n_state, n_state)
            self.out = Linear(n_state, n_state)

        def forward(
            self,
            x: Tensor,
            xa: Optional[Tensor] = None,
            mask: Optional[Tensor] = None,
            kv_cache: Optional[dict] = None,
        ):
            q = self.query(x)

            if kv_cache is None or xa is None or self.key not in kv_cache:
                # hooks, if installed (i.e. kv_cache is not None), will prepend the cached kv tensors;
                # otherwise, perform key/value projections for self- or cross-attention as usual.
                k = self.key(x if xa is None else xa)
                v = self.value(x if xa is None else xa)
            else:
                # for cross-attention, calculate keys and values once and reuse in subsequent calls.
                k = kv_cache[self.key]
                v = kv_cache[self.value]

            wv, qk = self.qkv_attention(q, k, v, mask)
            return self.out(wv), qk

        def qkv_attention(
            self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None
        ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
            n_batch, n_ctx, n_state = q.shape
            scale = (n_state // self.n_head) ** -0.25
            q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
            k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
            v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)

            if SDPA_AVAILABLE and MultiHeadAttention.use_sdpa:
                a = scaled_dot_product_attention(
                    q, k, v, is_causal=mask is not None and n_ctx > 1
                )
                out = a.permute(0, 2, 1, 3).flatten(start_dim=2)
                qk = None
            else:
                qk = (q * scale) @ (k * scale).transpose(-1, -2)
                if mask is not None:
                    qk = qk + mask[:n_ctx, :n_ctx]
                qk = qk.float()

                w = F.softmax(qk, dim=-1).to(q.dtype)
                out = (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2)
                qk = qk.detach()

            return out, qk

    class ResidualAttentionBlock(nn.Module):
        def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
            super().__init__()

            self.attn = MultiHeadAttention(n_state, n_head)
            self.attn_ln = LayerNorm(n_state)

            self.cross_attn = (
                MultiHeadAttention(n_state, n_head) if cross_attention else None
            )
            self.cross_attn_ln = LayerNorm(n_state) if cross_attention else None

            n_mlp = n_state * 4
            self.mlp = nn.Sequential(
                Linear(n_state, n_mlp), nn.GELU(), Linear(n_mlp, n_state)
            )
            self.mlp_ln = LayerNorm(n_state)

        def forward(
            self,
            x: Tensor,
            xa: Optional[Tensor] = None,
            mask: Optional[Tensor] = None,
            kv_cache: Optional[dict] = None,
        ):
            x = x + self.attn(self.attn_ln(x), mask=mask, kv_cache=kv_cache)[0]
            if self.cross_attn:
                x = x + self.cross_attn(self.cross_attn_ln(x), xa, kv_cache=kv_cache)[0]
            x = x + self.mlp(self.mlp_ln(x))
            return x

    class AudioEncoder(nn.Module):
        def __init__(
            self, n_mels: int, n_ctx: int, n_state: int, n_head: int, n_layer: int
        ):
            super().__init__()
            self.conv1 = Conv1d(n_mels, n_state, kernel_size=3, padding=1)
            self.conv2 = Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
            self.register_buffer("positional_embedding", sinusoids(n_ctx, n_state))

            self.blocks: Iterable[ResidualAttentionBlock] = nn.ModuleList(
                [ResidualAttentionBlock(n_state, n_head) for _ in range(n_layer)]
            )
            self.ln_post = LayerNorm(n_state)

        def forward(self, x: Tensor):
            """
            x : torch.Tensor, shape = (batch_size, n_mels, n_ctx)
                the mel spectrogram of the audio
            """
            x = F.gelu(self.conv1(x))
            x = F.gelu(self.conv2(x))
            x = x.permute(0, 2, 1)

            assert x.shape[1:] == self.positional_embedding.shape, "incorrect audio shape"
            x = (x + self.positional_embedding).to(x.dtype)

            for block in self.blocks:
                x = block(x)

            x = self.ln_post(x)
            return x

    class TextDecoder(nn.Module):
        def __init__(
            self, n_vocab: int, n_ctx: int, n_state: int, n_head: int, n_layer: int
        ):
            super().__init__()

            self.token_embedding = nn.Embedding(n_vocab, n_state)
            self.positional_embedding = nn.Parameter(torch.empty(n_ctx, n_state))

            self.blocks: Iterable[ResidualAttentionBlock] = nn.ModuleList(
                [
                    ResidualAttentionBlock(n_state, n_head, cross_attention=True)
                    for _ in range(n_layer)
                ]
            )
            self.ln = LayerNorm(n_state)

            mask = torch.empty(n_ctx, n_ctx).fill_(-np.inf).triu_(1)
            self.register_buffer("mask", mask, persistent=False)

        def forward(self, x: Tensor, xa: Tensor, kv_cache: Optional[dict] = None):
            """
            x : torch.LongTensor, shape = (batch_size, <= n_ctx)
                the text tokens
            xa : torch.Tensor, shape = (batch_size, n_audio_ctx, n_audio_state)
                the encoded audio features to be attended on
            """
            offset = next(iter(kv_cache.values())).shape[1] if kv_cache else 0
            x = (
                self.token_embedding(x)
                + self.positional_embedding[offset : offset + x.shape[-1]]
            )
            x = x.to(xa.dtype)

            for block in self.blocks:
                x = block(x, xa, mask=self.mask, kv_cache=kv_cache)

            x = self.ln(x)
            logits = (
                x @ torch.transpose(self.token_embedding.weight.to(x.dtype), 0, 1)
            ).float()

            return logits

    class Whisper(nn.Module):
        def __init__(self, dims: ModelDimensions):
            super().__init__()
            self.dims = dims
            self.encoder = AudioEncoder(
                self.dims.n_mels,
                self.dims.n_audio_ctx,
                self.dims.n_audio_state,
                self.dims.n_audio_head,
                self.dims.n_audio_layer,
            )
            self.decoder = TextDecoder(
                self.dims.n_vocab,
                self.dims.n_text_ctx,
                self.dims.n_text_state,
                self.dims.n_text_head,
                self.dims.n_text_layer,
            )
            # use the last half among the decoder layers for time alignment by default;
            # to use a specific set of heads, see `set_alignment_heads()` below.
            all_heads = torch.zeros(
                self.dims.n_text_layer, self.dims.n_text_head, dtype=torch.bool
            )
            all_heads[self.dims.n_text_layer // 2 :] = True
            self.register_buffer("alignment_heads", all_heads.to_sparse(), persistent=False)

        def set_alignment_heads(self, dump: bytes):
            array = np.frombuffer(
                gzip.decompress(base64.b85decode(dump)), dtype=bool
            ).copy()
            mask = torch.from_numpy(array).reshape(
                self.dims.n_text_layer, self.dims.n_text_head
            )
            self.register_buffer("alignment_heads", mask.to_sparse(), persistent=False)

        def embed_audio(self, mel: torch.Tensor):
            return self.encoder(mel)

        def logits(self, tokens: torch.Tensor, audio_features: torch.Tensor):
            return self.decoder(tokens, audio_features)

        def forward(
            self, mel: torch.Tensor, tokens: torch.Tensor
        ) -> Dict[str, torch.Tensor]:
            return self.decoder(tokens, self.encoder(mel))

        @property
        def device(self):
            return next(self.parameters()).device

        @property
        def is_multilingual(self):
            return self.dims.n_vocab >= 51865

        @property
        def num_languages(self):
            return self.dims.n_vocab - 51765 - int(self.is_multilingual)

        def install_kv_cache_hooks(self, cache: Optional[dict] = None):
            """
            The `MultiHeadAttention` module optionally accepts `kv_cache` which stores the key and value
            tensors calculated for the previous positions. This method returns a dictionary that stores
            all caches, and the necessary hooks for the key and value projection modules that save the
            intermediate tensors to be reused during later calculations.
            """
            cache = {**cache} if cache is not None else {}
            hooks = []

            def save_to_cache(module, _, output):
                if module not in cache or output.shape[1] > self.dims.n_text_ctx:
                    # save as-is, for the first token or cross attention
                    cache[module] = output
                else:
                    cache[module] = torch.cat([cache[module], output], dim=1).detach()
                return cache[module]

            def install_hooks(layer: nn.Module):
                if isinstance(layer, MultiHeadAttention):
                    hooks.append(layer.key.register_forward_hook(save_to_cache))
                    hooks.append(layer.value.register_forward_hook(save_to_cache))

            self.decoder.apply(install_hooks)
            return cache, hooks

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_")})


# ---------------------------------------------------------------------------------------------
# whisper/audio.py


def _librosa_mel(sr, n_fft, n_mels):
    """librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels) (htk=False, norm="slaney"), in NumPy:
    Whisper's mel_filters loads it from assets/mel_filters.npz, which is not available here."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f):
        f = np.asanyarray(f, dtype=np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m):
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2.0), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, 1 + n_fft // 2))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights.astype(np.float32), mel_f


def whisper_audio_page(torch):
    F = torch.nn.functional

    # hard-coded audio hyperparameters
    SAMPLE_RATE = 16000
    N_FFT = 400
    HOP_LENGTH = 160

    def pad_or_trim(array, length: int = 480000, *, axis: int = -1):
        """
        Pad or trim the audio array to N_SAMPLES, as expected by the encoder.
        """
        if torch.is_tensor(array):
            if array.shape[axis] > length:
                array = array.index_select(
                    dim=axis, index=torch.arange(length, device=array.device)
                )

            if array.shape[axis] < length:
                pad_widths = [(0, 0)] * array.ndim
                pad_widths[axis] = (0, length - array.shape[axis])
                array = F.pad(array, [pad for sizes in pad_widths[::-1] for pad in sizes])
        else:
            if array.shape[axis] > length:
                array = array.take(indices=range(length), axis=axis)

            if array.shape[axis] < length:
                pad_widths = [(0, 0)] * array.ndim
                pad_widths[axis] = (0, length - array.shape[axis])
                array = np.pad(array, pad_widths)

        return array

    @lru_cache(maxsize=None)
    def mel_filters(device, n_mels: int) -> torch.Tensor:
        """
        load the mel filterbank matrix for projecting STFT into a Mel spectrogram.
        (the original loads np.load("assets/mel_filters.npz")[f"mel_{n_mels}"], saved from librosa)
        """
        assert n_mels in {80, 128}, f"Unsupported n_mels: {n_mels}"
        return torch.from_numpy(_librosa_mel(SAMPLE_RATE, N_FFT, n_mels)[0]).to(device)

    def log_mel_spectrogram(
        audio,
        n_mels: int = 80,
        padding: int = 0,
        device=None,
    ):
        """
        Compute the log-Mel spectrogram of

        Returns
        -------
        torch.Tensor, shape = (n_mels, n_frames)
            A Tensor that contains the Mel spectrogram
        """
        if not torch.is_tensor(audio):
            audio = torch.from_numpy(audio)

        if device is not None:
            audio = audio.to(device)
        if padding > 0:
            audio = F.pad(audio, (0, padding))
        window = torch.hann_window(N_FFT).to(audio.device)
        stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, return_complex=True)
        magnitudes = stft[..., :-1].abs() ** 2

        filters = mel_filters(audio.device, n_mels)
        mel_spec = filters @ magnitudes

        log_spec = torch.clamp(mel_spec, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        log_spec = (log_spec + 4.0) / 4.0
        return log_spec

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_")})


def _np_log_mel(audio, n_mels=80, padding=0):
    """The same spectrogram from a NumPy STFT (center=True, reflect padding, periodic Hann)."""
    audio = np.pad(np.asarray(audio, np.float64), (0, padding))
    n_fft, hop = 400, 160
    x = np.pad(audio, n_fft // 2, mode="reflect")
    n_frames = 1 + (len(x) - n_fft) // hop
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = np.stack([x[i * hop : i * hop + n_fft] * window for i in range(n_frames)], axis=1)
    mags = np.abs(np.fft.rfft(frames, axis=0))[:, :-1] ** 2
    mel = _librosa_mel(16000, n_fft, n_mels)[0].astype(np.float64) @ mags
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


# ---------------------------------------------------------------------------------------------
# whisper/decoding.py (greedy part) and utils.compression_ratio


def whisper_decoding_page(torch, CHUNK_LENGTH=30):
    F = torch.nn.functional
    Tensor = torch.Tensor
    Categorical = import_module(torch.__name__ + ".distributions").Categorical

    def compression_ratio(text) -> float:
        text_bytes = text.encode("utf-8")
        return len(text_bytes) / len(zlib.compress(text_bytes))

    @dataclass(frozen=True)
    class DecodingOptions:
        # whether to perform X->X "transcribe" or X->English "translate"
        task: str = "transcribe"

        # language that the audio is in; uses detected language if None
        language: Optional[str] = None

        # sampling-related options
        temperature: float = 0.0
        sample_len: Optional[int] = None  # maximum number of tokens to sample
        best_of: Optional[int] = None  # number of independent sample trajectories, if t > 0
        beam_size: Optional[int] = None  # number of beams in beam search, if t == 0
        patience: Optional[float] = None  # patience in beam search (arxiv:2204.05424)

        # "alpha" in Google NMT, or None for length norm, when ranking generations
        # to select which to return among the beams or best-of-N samples
        length_penalty: Optional[float] = None

        # text or tokens to feed as the prompt or the prefix
        prompt: Optional[Union[str, List[int]]] = None  # for the previous context
        prefix: Optional[Union[str, List[int]]] = None  # to prefix the current context

        # list of tokens ids (or comma-separated token ids) to suppress
        # "-1" will suppress a set of symbols as defined in `tokenizer.non_speech_tokens()`
        suppress_tokens: Optional[Union[str, Iterable[int]]] = "-1"
        suppress_blank: bool = True  # this will suppress blank outputs

        # timestamp sampling options
        without_timestamps: bool = False  # use <|notimestamps|> to sample text tokens only
        max_initial_timestamp: Optional[float] = 1.0

        # implementation details
        fp16: bool = True  # use fp16 for most of the calculation

    @dataclass(frozen=True)
    class DecodingResult:
        audio_features: Tensor
        language: str
        language_probs: Optional[Dict[str, float]] = None
        tokens: List[int] = field(default_factory=list)
        text: str = ""
        avg_logprob: float = np.nan
        no_speech_prob: float = np.nan
        temperature: float = np.nan
        compression_ratio: float = np.nan

    class Inference:
        def logits(self, tokens: Tensor, audio_features: Tensor) -> Tensor:
            """Perform a forward pass on the decoder and return per-token logits"""
            raise NotImplementedError

        def rearrange_kv_cache(self, source_indices) -> None:
            """Update the key-value cache according to the updated beams"""
            raise NotImplementedError

        def cleanup_caching(self) -> None:
            """Clean up any resources or hooks after decoding is finished"""
            pass

    class PyTorchInference(Inference):
        def __init__(self, model, initial_token_length: int):
            self.model = model
            self.initial_token_length = initial_token_length
            self.kv_cache = {}
            self.hooks = []

        def logits(self, tokens: Tensor, audio_features: Tensor) -> Tensor:
            if not self.kv_cache:
                self.kv_cache, self.hooks = self.model.install_kv_cache_hooks()

            if tokens.shape[-1] > self.initial_token_length:
                # only need to use the last token except in the first forward pass
                tokens = tokens[:, -1:]

            return self.model.decoder(tokens, audio_features, kv_cache=self.kv_cache)

        def cleanup_caching(self):
            for hook in self.hooks:
                hook.remove()

            self.kv_cache = {}
            self.hooks = []

        def rearrange_kv_cache(self, source_indices):
            for module, tensor in self.kv_cache.items():
                # update the key/value cache to contain the selected sequences
                self.kv_cache[module] = tensor[source_indices].detach()

    class SequenceRanker:
        def rank(
            self, tokens: List[List[Tensor]], sum_logprobs: List[List[float]]
        ) -> List[int]:
            raise NotImplementedError

    class MaximumLikelihoodRanker(SequenceRanker):
        def __init__(self, length_penalty: Optional[float]):
            self.length_penalty = length_penalty

        def rank(self, tokens: List[List[Tensor]], sum_logprobs: List[List[float]]):
            def scores(logprobs, lengths):
                result = []
                for logprob, length in zip(logprobs, lengths):
                    if self.length_penalty is None:
                        penalty = length
                    else:
                        # from the Google NMT paper
                        penalty = ((5 + length) / 6) ** self.length_penalty
                    result.append(logprob / penalty)
                return result

            # get the sequence with the highest score
            lengths = [[len(t) for t in s] for s in tokens]
            return [np.argmax(scores(p, l)) for p, l in zip(sum_logprobs, lengths)]

    class TokenDecoder:
        def reset(self):
            """Initialize any stateful variables for decoding a new sequence"""

        def update(
            self, tokens: Tensor, logits: Tensor, sum_logprobs: Tensor
        ) -> Tuple[Tensor, bool]:
            raise NotImplementedError

        def finalize(
            self, tokens: Tensor, sum_logprobs: Tensor
        ) -> Tuple[Sequence[Sequence[Tensor]], List[List[float]]]:
            raise NotImplementedError

    class GreedyDecoder(TokenDecoder):
        def __init__(self, temperature: float, eot: int):
            self.temperature = temperature
            self.eot = eot

        def update(
            self, tokens: Tensor, logits: Tensor, sum_logprobs: Tensor
        ) -> Tuple[Tensor, bool]:
            if self.temperature == 0:
                next_tokens = logits.argmax(dim=-1)
            else:
                next_tokens = Categorical(logits=logits / self.temperature).sample()

            logprobs = F.log_softmax(logits.float(), dim=-1)
            current_logprobs = logprobs[torch.arange(logprobs.shape[0]), next_tokens]
            sum_logprobs += current_logprobs * (tokens[:, -1] != self.eot)

            next_tokens[tokens[:, -1] == self.eot] = self.eot
            tokens = torch.cat([tokens, next_tokens[:, None]], dim=-1)

            completed = (tokens[:, -1] == self.eot).all()
            return tokens, completed

        def finalize(self, tokens: Tensor, sum_logprobs: Tensor):
            # make sure each sequence has at least one EOT token at the end
            tokens = F.pad(tokens, (0, 1), value=self.eot)
            return tokens, sum_logprobs.tolist()

    class BeamSearchDecoder(TokenDecoder):
        def __init__(
            self,
            beam_size: int,
            eot: int,
            inference: Inference,
            patience: Optional[float] = None,
        ):
            self.beam_size = beam_size
            self.eot = eot
            self.inference = inference
            self.patience = patience or 1.0
            self.max_candidates: int = round(beam_size * self.patience)
            self.finished_sequences = None

            assert (
                self.max_candidates > 0
            ), f"Invalid beam size ({beam_size}) or patience ({patience})"

        def reset(self):
            self.finished_sequences = None

        def update(
            self, tokens: Tensor, logits: Tensor, sum_logprobs: Tensor
        ) -> Tuple[Tensor, bool]:
            if tokens.shape[0] % self.beam_size != 0:
                raise ValueError(f"{tokens.shape}[0] % {self.beam_size} != 0")

            n_audio = tokens.shape[0] // self.beam_size
            if self.finished_sequences is None:  # for the first update
                self.finished_sequences = [{} for _ in range(n_audio)]

            logprobs = F.log_softmax(logits.float(), dim=-1)
            next_tokens, source_indices, finished_sequences = [], [], []
            for i in range(n_audio):
                scores, sources, finished = {}, {}, {}

                # STEP 1: calculate the cumulative log probabilities for possible candidates
                for j in range(self.beam_size):
                    idx = i * self.beam_size + j
                    prefix = tokens[idx].tolist()
                    for logprob, token in zip(*logprobs[idx].topk(self.beam_size + 1)):
                        new_logprob = (sum_logprobs[idx] + logprob).item()
                        sequence = tuple(prefix + [token.item()])
                        scores[sequence] = new_logprob
                        sources[sequence] = idx

                # STEP 2: rank the candidates and keep the top beam_size sequences for each audio
                saved = 0
                for sequence in sorted(scores, key=scores.get, reverse=True):
                    if sequence[-1] == self.eot:
                        finished[sequence] = scores[sequence]
                    else:
                        sum_logprobs[len(next_tokens)] = scores[sequence]
                        next_tokens.append(sequence)
                        source_indices.append(sources[sequence])

                        saved += 1
                        if saved == self.beam_size:
                            break

                finished_sequences.append(finished)

            tokens = torch.tensor(next_tokens, device=tokens.device)
            self.inference.rearrange_kv_cache(source_indices)

            # add newly finished sequences to self.finished_sequences
            assert len(self.finished_sequences) == len(finished_sequences)
            for previously_finished, newly_finished in zip(
                self.finished_sequences, finished_sequences
            ):
                for seq in sorted(newly_finished, key=newly_finished.get, reverse=True):
                    if len(previously_finished) >= self.max_candidates:
                        break  # the candidate list is full
                    previously_finished[seq] = newly_finished[seq]

            # mark as completed if all audio has enough number of samples
            completed = all(
                len(sequences) >= self.max_candidates
                for sequences in self.finished_sequences
            )
            return tokens, completed

        def finalize(self, preceding_tokens: Tensor, sum_logprobs: Tensor):
            # collect all finished sequences, including patience, and add unfinished ones if not enough
            sum_logprobs = sum_logprobs.cpu()
            for i, sequences in enumerate(self.finished_sequences):
                if (
                    len(sequences) < self.beam_size
                ):  # when not enough sequences are finished
                    for j in list(np.argsort(sum_logprobs[i]))[::-1]:
                        sequence = preceding_tokens[i, j].tolist() + [self.eot]
                        sequences[tuple(sequence)] = sum_logprobs[i][j].item()
                        if len(sequences) >= self.beam_size:
                            break

            tokens: List[List[Tensor]] = [
                [torch.tensor(seq) for seq in sequences.keys()]
                for sequences in self.finished_sequences
            ]
            sum_logprobs: List[List[float]] = [
                list(sequences.values()) for sequences in self.finished_sequences
            ]
            return tokens, sum_logprobs

    class LogitFilter:
        def apply(self, logits: Tensor, tokens: Tensor) -> None:
            """Apply any filtering or masking to logits in-place"""
            raise NotImplementedError

    class SuppressBlank(LogitFilter):
        def __init__(self, tokenizer, sample_begin: int):
            self.tokenizer = tokenizer
            self.sample_begin = sample_begin

        def apply(self, logits: Tensor, tokens: Tensor):
            if tokens.shape[1] == self.sample_begin:
                logits[:, self.tokenizer.encode(" ") + [self.tokenizer.eot]] = -np.inf

    class SuppressTokens(LogitFilter):
        def __init__(self, suppress_tokens: Sequence[int]):
            self.suppress_tokens = list(suppress_tokens)

        def apply(self, logits: Tensor, tokens: Tensor):
            logits[:, self.suppress_tokens] = -np.inf

    class ApplyTimestampRules(LogitFilter):
        def __init__(
            self,
            tokenizer,
            sample_begin: int,
            max_initial_timestamp_index: Optional[int],
        ):
            self.tokenizer = tokenizer
            self.sample_begin = sample_begin
            self.max_initial_timestamp_index = max_initial_timestamp_index

        def apply(self, logits: Tensor, tokens: Tensor):
            # suppress <|notimestamps|> which is handled by without_timestamps
            if self.tokenizer.no_timestamps is not None:
                logits[:, self.tokenizer.no_timestamps] = -np.inf

            # timestamps have to appear in pairs, except directly before EOT; mask logits accordingly
            for k in range(tokens.shape[0]):
                sampled_tokens = tokens[k, self.sample_begin :]
                seq = [t for t in sampled_tokens.tolist()]
                last_was_timestamp = (
                    len(seq) >= 1 and seq[-1] >= self.tokenizer.timestamp_begin
                )
                penultimate_was_timestamp = (
                    len(seq) < 2 or seq[-2] >= self.tokenizer.timestamp_begin
                )

                if last_was_timestamp:
                    if penultimate_was_timestamp:  # has to be non-timestamp
                        logits[k, self.tokenizer.timestamp_begin :] = -np.inf
                    else:  # cannot be normal text tokens
                        logits[k, : self.tokenizer.eot] = -np.inf

                timestamps = sampled_tokens[
                    sampled_tokens.ge(self.tokenizer.timestamp_begin)
                ]
                if timestamps.numel() > 0:
                    # timestamps shouldn't decrease; forbid timestamp tokens smaller than the last
                    # also force each segment to have a nonzero length, to prevent infinite looping
                    if last_was_timestamp and not penultimate_was_timestamp:
                        timestamp_last = timestamps[-1]
                    else:
                        timestamp_last = timestamps[-1] + 1
                    logits[k, self.tokenizer.timestamp_begin : timestamp_last] = -np.inf

            if tokens.shape[1] == self.sample_begin:
                # suppress generating non-timestamp tokens at the beginning
                logits[:, : self.tokenizer.timestamp_begin] = -np.inf

                # apply the `max_initial_timestamp` option
                if self.max_initial_timestamp_index is not None:
                    last_allowed = (
                        self.tokenizer.timestamp_begin + self.max_initial_timestamp_index
                    )
                    logits[:, last_allowed + 1 :] = -np.inf

            # if sum of probability over timestamps is above any other token, sample timestamp
            logprobs = F.log_softmax(logits.float(), dim=-1)
            for k in range(tokens.shape[0]):
                timestamp_logprob = logprobs[k, self.tokenizer.timestamp_begin :].logsumexp(
                    dim=-1
                )
                max_text_token_logprob = logprobs[k, : self.tokenizer.timestamp_begin].max()
                if timestamp_logprob > max_text_token_logprob:
                    logits[k, : self.tokenizer.timestamp_begin] = -np.inf

    class DecodingTask:
        inference: Inference
        sequence_ranker: SequenceRanker
        decoder: TokenDecoder
        logit_filters: List[LogitFilter]

        def __init__(self, model, options: DecodingOptions, tokenizer):  # tokenizer: get_tokenizer(...)
            self.model = model

            self.tokenizer = tokenizer
            self.options: DecodingOptions = self._verify_options(options)

            self.n_group: int = options.beam_size or options.best_of or 1
            self.n_ctx: int = model.dims.n_text_ctx
            self.sample_len: int = options.sample_len or model.dims.n_text_ctx // 2

            self.sot_sequence: Tuple[int] = tokenizer.sot_sequence
            if self.options.without_timestamps:
                self.sot_sequence = tokenizer.sot_sequence_including_notimestamps

            self.initial_tokens: Tuple[int] = self._get_initial_tokens()
            self.sample_begin: int = len(self.initial_tokens)
            self.sot_index: int = self.initial_tokens.index(tokenizer.sot)

            # inference: implements the forward pass through the decoder, including kv caching
            self.inference = PyTorchInference(model, len(self.initial_tokens))

            # sequence ranker: implements how to rank a group of sampled sequences
            self.sequence_ranker = MaximumLikelihoodRanker(options.length_penalty)

            # decoder: implements how to select the next tokens, given the autoregressive distribution
            if options.beam_size is not None:
                self.decoder = BeamSearchDecoder(
                    options.beam_size, tokenizer.eot, self.inference, options.patience
                )
            else:
                self.decoder = GreedyDecoder(options.temperature, tokenizer.eot)

            # logit filters: applies various rules to suppress or penalize certain tokens
            self.logit_filters = []
            if self.options.suppress_blank:
                self.logit_filters.append(SuppressBlank(self.tokenizer, self.sample_begin))
            if self.options.suppress_tokens:
                self.logit_filters.append(SuppressTokens(self._get_suppress_tokens()))
            if not options.without_timestamps:
                precision = CHUNK_LENGTH / model.dims.n_audio_ctx  # usually 0.02 seconds
                max_initial_timestamp_index = None
                if options.max_initial_timestamp:
                    max_initial_timestamp_index = round(
                        self.options.max_initial_timestamp / precision
                    )
                self.logit_filters.append(
                    ApplyTimestampRules(
                        tokenizer, self.sample_begin, max_initial_timestamp_index
                    )
                )

        def _verify_options(self, options: DecodingOptions) -> DecodingOptions:
            if options.beam_size is not None and options.best_of is not None:
                raise ValueError("beam_size and best_of can't be given together")
            if options.temperature == 0:
                if options.best_of is not None:
                    raise ValueError("best_of with greedy sampling (T=0) is not compatible")
            if options.patience is not None and options.beam_size is None:
                raise ValueError("patience requires beam_size to be given")
            if options.length_penalty is not None and not (
                0 <= options.length_penalty <= 1
            ):
                raise ValueError("length_penalty (alpha) should be a value between 0 and 1")

            return options

        def _get_initial_tokens(self) -> Tuple[int]:
            tokens = list(self.sot_sequence)

            if prefix := self.options.prefix:
                prefix_tokens = (
                    self.tokenizer.encode(" " + prefix.strip())
                    if isinstance(prefix, str)
                    else prefix
                )
                if self.sample_len is not None:
                    max_prefix_len = self.n_ctx // 2 - self.sample_len
                    prefix_tokens = prefix_tokens[-max_prefix_len:]
                tokens = tokens + prefix_tokens

            if prompt := self.options.prompt:
                prompt_tokens = (
                    self.tokenizer.encode(" " + prompt.strip())
                    if isinstance(prompt, str)
                    else prompt
                )
                tokens = (
                    [self.tokenizer.sot_prev]
                    + prompt_tokens[-(self.n_ctx // 2 - 1) :]
                    + tokens
                )

            return tuple(tokens)

        def _get_suppress_tokens(self) -> Tuple[int]:
            suppress_tokens = self.options.suppress_tokens

            if isinstance(suppress_tokens, str):
                suppress_tokens = [int(t) for t in suppress_tokens.split(",")]

            if -1 in suppress_tokens:
                suppress_tokens = [t for t in suppress_tokens if t >= 0]
                suppress_tokens.extend(self.tokenizer.non_speech_tokens)
            elif suppress_tokens is None or len(suppress_tokens) == 0:
                suppress_tokens = []  # interpret empty string as an empty list
            else:
                assert isinstance(suppress_tokens, list), "suppress_tokens must be a list"

            suppress_tokens.extend(
                [
                    self.tokenizer.transcribe,
                    self.tokenizer.translate,
                    self.tokenizer.sot,
                    self.tokenizer.sot_prev,
                    self.tokenizer.sot_lm,
                ]
            )
            if self.tokenizer.no_speech is not None:
                # no-speech probability is collected separately
                suppress_tokens.append(self.tokenizer.no_speech)

            return tuple(sorted(set(suppress_tokens)))

        def _get_audio_features(self, mel: Tensor):
            if self.options.fp16:
                mel = mel.half()

            if mel.shape[-2:] == (
                self.model.dims.n_audio_ctx,
                self.model.dims.n_audio_state,
            ):
                # encoded audio features are given; skip audio encoding
                audio_features = mel
            else:
                audio_features = self.model.encoder(mel)

            if audio_features.dtype != (
                torch.float16 if self.options.fp16 else torch.float32
            ):
                return TypeError(
                    f"audio_features has an incorrect dtype: {audio_features.dtype}"
                )

            return audio_features

        def _detect_language(self, audio_features: Tensor, tokens: Tensor):
            languages = [self.options.language] * audio_features.shape[0]
            lang_probs = None

            if self.options.language is None or self.options.task == "lang_id":
                lang_tokens, lang_probs = self.model.detect_language(
                    audio_features, self.tokenizer
                )
                languages = [max(probs, key=probs.get) for probs in lang_probs]
                if self.options.language is None:
                    tokens[:, self.sot_index + 1] = lang_tokens  # write language tokens

            return languages, lang_probs

        def _main_loop(self, audio_features: Tensor, tokens: Tensor):
            assert audio_features.shape[0] == tokens.shape[0]
            n_batch = tokens.shape[0]
            sum_logprobs: Tensor = torch.zeros(n_batch, device=audio_features.device)
            no_speech_probs = [np.nan] * n_batch

            try:
                for i in range(self.sample_len):
                    logits = self.inference.logits(tokens, audio_features)

                    if (
                        i == 0 and self.tokenizer.no_speech is not None
                    ):  # save no_speech_probs
                        probs_at_sot = logits[:, self.sot_index].float().softmax(dim=-1)
                        no_speech_probs = probs_at_sot[:, self.tokenizer.no_speech].tolist()

                    # now we need to consider the logits at the last token only
                    logits = logits[:, -1]

                    # apply the logit filters, e.g. for suppressing or applying penalty to
                    for logit_filter in self.logit_filters:
                        logit_filter.apply(logits, tokens)

                    # expand the tokens tensor with the selected next tokens
                    tokens, completed = self.decoder.update(tokens, logits, sum_logprobs)

                    if completed or tokens.shape[-1] > self.n_ctx:
                        break
            finally:
                self.inference.cleanup_caching()

            return tokens, sum_logprobs, no_speech_probs

        @torch.no_grad()
        def run(self, mel: Tensor) -> List[DecodingResult]:
            self.decoder.reset()
            tokenizer = self.tokenizer
            n_audio: int = mel.shape[0]

            audio_features: Tensor = self._get_audio_features(mel)  # encoder forward pass
            tokens: Tensor = torch.tensor([self.initial_tokens]).repeat(n_audio, 1)

            # detect language if requested, overwriting the language token
            languages, language_probs = self._detect_language(audio_features, tokens)
            if self.options.task == "lang_id":
                return [
                    DecodingResult(
                        audio_features=features, language=language, language_probs=probs
                    )
                    for features, language, probs in zip(
                        audio_features, languages, language_probs
                    )
                ]

            # repeat the audio & text tensors by the group size, for beam search or best-of-n sampling
            audio_features = audio_features.repeat_interleave(self.n_group, dim=0)
            tokens = tokens.repeat_interleave(self.n_group, dim=0).to(audio_features.device)

            # call the main sampling loop
            tokens, sum_logprobs, no_speech_probs = self._main_loop(audio_features, tokens)

            # reshape the tensors to have (n_audio, n_group) as the first two dimensions
            audio_features = audio_features[:: self.n_group]
            no_speech_probs = no_speech_probs[:: self.n_group]
            assert audio_features.shape[0] == len(no_speech_probs) == n_audio

            tokens = tokens.reshape(n_audio, self.n_group, -1)
            sum_logprobs = sum_logprobs.reshape(n_audio, self.n_group)

            # get the final candidates for each group, and slice between the first sampled token and EOT
            tokens, sum_logprobs = self.decoder.finalize(tokens, sum_logprobs)
            tokens: List[List[Tensor]] = [
                [t[self.sample_begin : (t == tokenizer.eot).nonzero()[0, 0]] for t in s]
                for s in tokens
            ]

            # select the top-ranked sample in each group
            selected = self.sequence_ranker.rank(tokens, sum_logprobs)
            tokens: List[List[int]] = [t[i].tolist() for i, t in zip(selected, tokens)]
            texts: List[str] = [tokenizer.decode(t).strip() for t in tokens]

            sum_logprobs: List[float] = [lp[i] for i, lp in zip(selected, sum_logprobs)]
            avg_logprobs: List[float] = [
                lp / (len(t) + 1) for t, lp in zip(tokens, sum_logprobs)
            ]

            fields = (
                texts,
                languages,
                tokens,
                audio_features,
                avg_logprobs,
                no_speech_probs,
            )
            if len(set(map(len, fields))) != 1:
                raise RuntimeError(f"inconsistent result lengths: {list(map(len, fields))}")

            return [
                DecodingResult(
                    audio_features=features,
                    language=language,
                    tokens=tokens,
                    text=text,
                    avg_logprob=avg_logprob,
                    no_speech_prob=no_speech_prob,
                    temperature=self.options.temperature,
                    compression_ratio=compression_ratio(text),
                )
                for text, language, tokens, features, avg_logprob, no_speech_prob in zip(
                    *fields
                )
            ]

    @torch.no_grad()
    def decode(model, mel: Tensor, tokenizer, options: DecodingOptions = DecodingOptions(), **kwargs):
        if single := mel.ndim == 2:
            mel = mel.unsqueeze(0)

        if kwargs:
            options = replace(options, **kwargs)

        result = DecodingTask(model, options, tokenizer).run(mel)

        return result[0] if single else result

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_")})


# ---------------------------------------------------------------------------------------------
# whisper/timing.py (CPU paths: the Triton kernels and numba's jit are left out)


def whisper_timing_page(torch, M, TOKENS_PER_SECOND=50):
    F = torch.nn.functional
    disable_sdpa = M.disable_sdpa

    def median_filter(x: torch.Tensor, filter_width: int):
        """Apply a median filter of width `filter_width` along the last dimension of `x`"""
        pad_width = filter_width // 2
        if x.shape[-1] <= pad_width:
            # F.pad requires the padding width to be smaller than the input dimension
            return x

        if (ndim := x.ndim) <= 2:
            # `F.pad` does not support 1D or 2D inputs for reflect padding but supports 3D and 4D
            x = x[None, None, :]

        assert (
            filter_width > 0 and filter_width % 2 == 1
        ), "`filter_width` should be an odd number"

        result = None
        x = F.pad(x, (filter_width // 2, filter_width // 2, 0, 0), mode="reflect")

        if result is None:
            # sort() is faster than torch.median (https://github.com/pytorch/pytorch/issues/51450)
            result = x.unfold(-1, filter_width, 1).sort()[0][..., filter_width // 2]

        if ndim <= 2:
            result = result[0, 0]

        return result

    def backtrace(trace: np.ndarray):
        i = trace.shape[0] - 1
        j = trace.shape[1] - 1
        trace[0, :] = 2
        trace[:, 0] = 1

        result = []
        while i > 0 or j > 0:
            result.append((i - 1, j - 1))

            if trace[i, j] == 0:
                i -= 1
                j -= 1
            elif trace[i, j] == 1:
                i -= 1
            elif trace[i, j] == 2:
                j -= 1
            else:
                raise ValueError("Unexpected trace[i, j]")

        result = np.array(result)
        return result[::-1, :].T

    def dtw_cpu(x: np.ndarray):
        N, M = x.shape
        cost = np.ones((N + 1, M + 1), dtype=np.float32) * np.inf
        trace = -np.ones((N + 1, M + 1), dtype=np.float32)

        cost[0, 0] = 0
        for j in range(1, M + 1):
            for i in range(1, N + 1):
                c0 = cost[i - 1, j - 1]
                c1 = cost[i - 1, j]
                c2 = cost[i, j - 1]

                if c0 < c1 and c0 < c2:
                    c, t = c0, 0
                elif c1 < c0 and c1 < c2:
                    c, t = c1, 1
                else:
                    c, t = c2, 2

                cost[i, j] = x[i - 1, j - 1] + c
                trace[i, j] = t

        return backtrace(trace)

    def dtw(x: torch.Tensor) -> np.ndarray:
        return dtw_cpu(x.double().cpu().numpy())

    @dataclass
    class WordTiming:
        word: str
        tokens: List[int]
        start: float
        end: float
        probability: float

    def find_alignment(
        model,
        tokenizer,
        text_tokens: List[int],
        mel: torch.Tensor,
        num_frames: int,
        *,
        medfilt_width: int = 7,
        qk_scale: float = 1.0,
    ) -> List[WordTiming]:
        if len(text_tokens) == 0:
            return []

        tokens = torch.tensor(
            [
                *tokenizer.sot_sequence,
                tokenizer.no_timestamps,
                *text_tokens,
                tokenizer.eot,
            ]
        ).to(model.device)

        # install hooks on the cross attention layers to retrieve the attention weights
        QKs = [None] * model.dims.n_text_layer
        hooks = [
            block.cross_attn.register_forward_hook(
                lambda _, ins, outs, index=i: QKs.__setitem__(index, outs[-1][0])
            )
            for i, block in enumerate(model.decoder.blocks)
        ]

        with torch.no_grad(), disable_sdpa():
            logits = model(mel.unsqueeze(0), tokens.unsqueeze(0))[0]
            sampled_logits = logits[len(tokenizer.sot_sequence) :, : tokenizer.eot]
            token_probs = sampled_logits.softmax(dim=-1)
            text_token_probs = token_probs[np.arange(len(text_tokens)), text_tokens]
            text_token_probs = text_token_probs.tolist()

        for hook in hooks:
            hook.remove()

        # heads * tokens * frames
        weights = torch.stack([QKs[l][h] for l, h in model.alignment_heads.indices().T])
        weights = weights[:, :, : num_frames // 2]
        weights = (weights * qk_scale).softmax(dim=-1)
        std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
        weights = (weights - mean) / std
        weights = median_filter(weights, medfilt_width)

        matrix = weights.mean(axis=0)
        matrix = matrix[len(tokenizer.sot_sequence) : -1]
        text_indices, time_indices = dtw(-matrix)

        words, word_tokens = tokenizer.split_to_word_tokens(text_tokens + [tokenizer.eot])
        word_boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))

        jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
        jump_times = time_indices[jumps] / TOKENS_PER_SECOND
        start_times = jump_times[word_boundaries[:-1]]
        end_times = jump_times[word_boundaries[1:]]
        word_probabilities = [
            np.mean(text_token_probs[i:j])
            for i, j in zip(word_boundaries[:-1], word_boundaries[1:])
        ]

        # hack: truncate long words at the start of a window and the start of a sentence.
        # a better segmentation algorithm based on VAD should be able to replace this.
        word_durations = end_times - start_times
        word_durations = word_durations[word_durations.nonzero()]
        if len(word_durations) > 0:
            median_duration = np.median(word_durations)
            max_duration = median_duration * 2
            sentence_end_marks = ".。!！?？"
            # ensure words at sentence boundaries are not longer than twice the median word duration.
            for i in range(1, len(start_times)):
                if end_times[i] - start_times[i] > max_duration:
                    if words[i] in sentence_end_marks:
                        end_times[i] = start_times[i] + max_duration
                    elif words[i - 1] in sentence_end_marks:
                        start_times[i] = end_times[i] - max_duration
            # ensure the first and second word is not longer than twice the median word duration.
            if len(start_times) > 0 and end_times[0] - start_times[0] > max_duration:
                if len(start_times) > 1 and end_times[1] - start_times[1] > max_duration:
                    boundary = max(end_times[1] / 2, end_times[1] - max_duration)
                    end_times[0] = start_times[1] = boundary
                start_times[0] = max(0, end_times[0] - max_duration)

        return [
            WordTiming(word, tokens, start, end, probability)
            for word, tokens, start, end, probability in zip(
                words, word_tokens, start_times, end_times, word_probabilities
            )
        ]

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_")})


# The tokenizer stand-in: Whisper's special-token layout on a 36-token vocabulary.
_TOK = SimpleNamespace(
    eot=20, sot=21, sot_prev=22, sot_lm=23, transcribe=24, translate=25, no_speech=26,
    no_timestamps=27, timestamp_begin=28, non_speech_tokens=(2, 3),
    sot_sequence=(21, 24), sot_sequence_including_notimestamps=(21, 24, 27),
    encode=lambda s: [1] if s == " " else [4 + (ord(c) % 16) for c in s],
    decode=lambda ts: "".join(chr(97 + t) if t < 20 else "" for t in ts),
    # words of two text tokens, the eot alone (the real one splits on spaces)
    split_to_word_tokens=lambda ts: (
        [" " + "".join(chr(97 + t) for t in ts[:-1][i : i + 2]) for i in range(0, len(ts) - 1, 2)]
        + ["<|endoftext|>"], [ts[:-1][i : i + 2] for i in range(0, len(ts) - 1, 2)] + [ts[-1:]]))

_DIMS = dict(n_mels=80, n_audio_ctx=10, n_audio_state=16, n_audio_head=2, n_audio_layer=1,
             n_vocab=36, n_text_ctx=10, n_text_state=16, n_text_head=2, n_text_layer=2)


def _audio(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000.0
    a = 0.5 * np.sin(2 * np.pi * (300 + 2000 * t) * t) + 0.2 * np.sin(2 * np.pi * 1200 * t)
    return (a + 0.05 * rng.standard_normal(n)).astype(np.float32)


def _whisper(torch, seed=0, sdpa=True):
    M = whisper_model_page(torch)
    M.MultiHeadAttention.use_sdpa = sdpa
    torch.manual_seed(0)
    model = M.Whisper(M.ModelDimensions(**_DIMS))
    _set_params(torch, model, seed)
    return M, model.eval()


def _mels(torch, A):
    """Two log-mel spectrograms of 3200 samples (20 frames for the 10-position encoder)."""
    return torch.stack([A.log_mel_spectrogram(A.pad_or_trim(torch.tensor(_audio(n, s)), 3200))
                        for n, s in ((3000, 0), (3500, 1))])


def _np_attention(x, xa, W, n_head, mask=None):
    """Whisper's MultiHeadAttention in NumPy float64: softmax((q k^T) / sqrt(d) + mask) v."""
    q = x @ W["query.weight"].T + W["query.bias"]
    src = x if xa is None else xa
    k = src @ W["key.weight"].T
    v = src @ W["value.weight"].T + W["value.bias"]
    B, T, D = q.shape
    d = D // n_head
    split = lambda t: t.reshape(B, t.shape[1], n_head, d).transpose(0, 2, 1, 3)
    q, k, v = split(q), split(k), split(v)
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    if mask is not None:
        s = s + mask
    s = np.exp(s - s.max(-1, keepdims=True))
    w = s / s.sum(-1, keepdims=True)
    o = (w @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    return o @ W["out.weight"].T + W["out.bias"], w


def _sd64(module):
    return {k: v.detach().cpu().double().numpy() for k, v in module.state_dict().items()}


# ---------------------------------------------------------------------------------------------
# Whisper tests


def test_whisper_sinusoids_and_pad_or_trim():
    M = whisper_model_page(lucid)
    A = whisper_audio_page(lucid)
    s = M.sinusoids(7, 8)
    inc = np.log(10000) / 3
    ang = np.arange(7)[:, None] * np.exp(-inc * np.arange(4))[None, :]
    assert s.dtype == lucid.float32 and tuple(s.shape) == (7, 8)
    np.testing.assert_allclose(s.cpu().numpy(), np.concatenate([np.sin(ang), np.cos(ang)], 1), atol=2e-6)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for length in (4, 6, 9):
        ref = np.pad(x[:, :length], [(0, 0), (0, max(0, length - 6))])
        np.testing.assert_array_equal(A.pad_or_trim(x, length), ref)  # the NumPy branch
        got = A.pad_or_trim(lucid.tensor(x), length)
        assert lucid.is_tensor(got)
        np.testing.assert_array_equal(got.cpu().numpy(), ref)
    got = A.pad_or_trim(lucid.tensor(x), 1, axis=0)  # trimming along another axis
    np.testing.assert_array_equal(got.cpu().numpy(), x[:1])
    got = A.pad_or_trim(lucid.tensor(x), 3, axis=0)
    np.testing.assert_array_equal(got.cpu().numpy(), np.pad(x, [(0, 1), (0, 0)]))


def test_whisper_mel_filters_and_log_mel_spectrogram():
    A = whisper_audio_page(lucid)
    fb = A.mel_filters(lucid.get_default_device(), 80)
    assert tuple(fb.shape) == (80, 201) and fb.dtype == lucid.float32
    assert A.mel_filters(lucid.get_default_device(), 80) is fb  # lru_cache on the device
    W, mel_f = _librosa_mel(16000, 400, 80)
    # Slaney filters: triangles of height 2 / (f[i+2] - f[i]), each peaking at its centre mel_f[i+1]
    freqs = np.fft.rfftfreq(400, 1 / 16000)
    heights = 2.0 / (mel_f[2:] - mel_f[:-2])
    assert (W >= 0).all() and (W.max(1) <= heights * (1 + 1e-6)).all() and (W.sum(1) > 0).all()
    peak = freqs[W.argmax(1)]
    assert (np.abs(peak - mel_f[1:-1]) <= 40.0).all()  # within one 40 Hz bin
    with pytest.raises(AssertionError, match="Unsupported n_mels"):
        A.mel_filters(lucid.get_default_device(), 64)

    audio = _audio(3000)
    for padding in (0, 200):
        got = A.log_mel_spectrogram(lucid.tensor(audio), padding=padding)
        ref = _np_log_mel(audio, padding=padding)
        assert tuple(got.shape) == ref.shape == (80, 18 + (padding > 0) + (padding > 0))
        np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=1e-4, atol=2e-5)
    # a batch of waveforms and the NumPy input branch
    both = np.stack([audio, audio[::-1].copy()])
    got = A.log_mel_spectrogram(both)  # from_numpy, on the CPU
    ref = _np_log_mel(audio[::-1])
    np.testing.assert_allclose(got[1].cpu().numpy(), ref, rtol=1e-4, atol=2e-5)


def test_whisper_attention_paths_match_numpy():
    M = whisper_model_page(lucid)
    lucid.manual_seed(0)
    attn = M.MultiHeadAttention(8, 2)
    _set_params(lucid, attn, 1)
    W = _sd64(attn)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    xa = rng.standard_normal((2, 7, 8)).astype(np.float32)
    mask = np.triu(np.full((6, 6), -np.inf), 1)
    assert M.SDPA_AVAILABLE and M.MultiHeadAttention.use_sdpa
    outs = {}
    for sdpa in (True, False):
        ctx = M.disable_sdpa() if not sdpa else _nullcontext()
        with ctx:
            assert M.MultiHeadAttention.use_sdpa is sdpa
            self_out, self_qk = attn(lucid.tensor(x), mask=lucid.tensor(mask, dtype=lucid.float32))
            cross_out, cross_qk = attn(lucid.tensor(x), lucid.tensor(xa))
        outs[sdpa] = self_out, cross_out
        ref, w = _np_attention(x.astype(np.float64), None, W, 2, mask[:5, :5])
        np.testing.assert_allclose(self_out.detach().cpu().numpy(), ref, rtol=1e-5, atol=1e-5)
        ref_c, w_c = _np_attention(x.astype(np.float64), xa.astype(np.float64), W, 2)
        np.testing.assert_allclose(cross_out.detach().cpu().numpy(), ref_c, rtol=1e-5, atol=1e-5)
        if sdpa:
            assert self_qk is None and cross_qk is None
        else:  # the manual path returns the (detached) scores
            assert tuple(self_qk.shape) == (2, 2, 5, 5) and not self_qk.requires_grad
            qk = self_qk.cpu().numpy()
            assert np.isneginf(qk[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]]).all()
            e = np.exp(qk - qk.max(-1, keepdims=True))
            np.testing.assert_allclose(e / e.sum(-1, keepdims=True), w, rtol=1e-5, atol=1e-6)
    assert M.MultiHeadAttention.use_sdpa  # disable_sdpa restored the flag


@contextmanager
def _nullcontext():
    yield


def test_whisper_causal_mask_encoder_and_decoder():
    M, model = _whisper(lucid)
    A = whisper_audio_page(lucid)
    mask = model.decoder.mask.cpu().numpy()
    assert "mask" not in model.state_dict() and "alignment_heads" not in model.state_dict()
    np.testing.assert_array_equal(mask, np.triu(np.full((10, 10), -np.inf), 1))  # no NaN from -inf * 0
    heads = model.alignment_heads
    assert heads.is_sparse and heads.to_dense().tolist() == [[False, False], [True, True]]
    model.set_alignment_heads(base64.b85encode(gzip.compress(np.array([[1, 0], [0, 1]], bool).tobytes())))
    heads = model.alignment_heads
    assert heads.is_sparse and heads.to_dense().tolist() == [[True, False], [False, True]]
    assert heads.coalesce().indices().tolist() == [[0, 1], [0, 1]] and "alignment_heads" not in model.state_dict()
    np.testing.assert_allclose(model.encoder.positional_embedding.cpu().numpy(),
                               M.sinusoids(10, 16).cpu().numpy())
    mel = _mels(lucid, A)
    assert tuple(mel.shape) == (2, 80, 20)
    with lucid.no_grad():
        feats = model.embed_audio(mel)
        assert tuple(feats.shape) == (2, 10, 16)
        ln = model.encoder.ln_post
        f = (feats.cpu().numpy() - ln.bias.cpu().numpy()) / ln.weight.cpu().numpy()
        np.testing.assert_allclose(f.mean(-1), 0, atol=1e-5)  # ln_post normalised, then scaled
        np.testing.assert_allclose(f.var(-1), 1, rtol=1e-3)
        with pytest.raises(AssertionError, match="incorrect audio shape"):
            model.embed_audio(mel[..., :18])
        tokens = lucid.tensor([[21, 24, 5, 6, 7, 8], [21, 24, 9, 9, 1, 2]])
        full = model.logits(tokens, feats)
        assert full.dtype == lucid.float32 and tuple(full.shape) == (2, 6, 36)
        np.testing.assert_allclose(model(mel, tokens).cpu().numpy(), full.cpu().numpy(), rtol=1e-6, atol=1e-6)
        # causality: changing token 4 changes no logits before position 4
        changed = tokens.clone()
        changed[:, 4] = 11
        other = model.logits(changed, feats)
        np.testing.assert_array_equal(other[:, :4].cpu().numpy(), full[:, :4].cpu().numpy())
        assert np.abs(other[:, 4:].cpu().numpy() - full[:, 4:].cpu().numpy()).max() > 1e-3
        with M.disable_sdpa():  # the manual path gives the same logits
            np.testing.assert_allclose(model.logits(tokens, feats).cpu().numpy(), full.cpu().numpy(),
                                       rtol=1e-5, atol=1e-5)
    assert model.device == lucid.get_default_device() and not model.is_multilingual


class _Recording:
    """Wraps PyTorchInference.logits: keeps a copy of each step's raw logits and the tensor itself,
    whose last row the logit filters then change in place."""

    def __init__(self, inner):
        self.inner, self.raw, self.returned = inner, [], []

    def logits(self, tokens, audio_features):
        out = self.inner.logits(tokens, audio_features)
        self.raw.append(out.clone())
        self.returned.append(out)
        return out

    def cleanup_caching(self):
        self.inner.cleanup_caching()

    def rearrange_kv_cache(self, source_indices):
        self.inner.rearrange_kv_cache(source_indices)


def _log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def whisper_decode_run(torch, sdpa=True, **options):
    M, model = _whisper(torch, sdpa=sdpa)
    A = whisper_audio_page(torch)
    D = whisper_decoding_page(torch)
    mel = _mels(torch, A)
    opts = D.DecodingOptions(language="en", **{"fp16": False, **options})
    task = D.DecodingTask(model, opts, _TOK)
    rec = _Recording(task.inference)
    task.inference = rec
    results = task.run(mel)
    with torch.no_grad():
        feats = task._get_audio_features(mel)  # float16 under the default fp16=True
    return SimpleNamespace(model=model, task=task, rec=rec, results=results, feats=feats, mel=mel,
                           hooks_left=sum(len(m._forward_hooks) for m in model.modules()))


def _check_decode(torch, r, with_timestamps, tol=2e-5, greedy=True):
    """The greedy loop against a full recompute without the cache, replayed in NumPy."""
    task, rec, results = r.task, r.rec, r.results
    assert r.hooks_left == 0 and rec.inner.kv_cache == {}  # cleanup_caching removed the hooks
    L0 = task.sample_begin
    assert L0 == (2 if with_timestamps else 3)
    steps = len(rec.raw)
    assert 1 <= steps <= task.sample_len
    seqs = [list(task.initial_tokens) for _ in range(2)]
    sum_lp = np.zeros(2)
    finished = [False, False]
    suppressed = sorted({2, 3, 22, 23, 24, 25, 26, 21})
    for i in range(steps):
        raw = rec.raw[i].cpu().numpy()
        # step 0 sees all initial tokens, later steps only the newest one (through the kv cache)
        assert raw.shape == (2, L0 if i == 0 else 1, 36)
        with torch.no_grad():
            full = r.model.logits(torch.tensor(seqs), r.feats).cpu().numpy()
        assert rec.raw[i].dtype == torch.float32  # the decoder's .float() logits
        np.testing.assert_allclose(raw[:, -1], full[:, -1], rtol=tol / 2, atol=tol)
        filt = rec.returned[i][:, -1].cpu().numpy()
        kept = np.isfinite(filt)
        np.testing.assert_array_equal(filt[kept], raw[:, -1][kept])  # filters only write -inf
        assert np.isneginf(filt[:, suppressed]).all()
        if i == 0:
            assert np.isneginf(filt[:, [1, 20]]).all()  # SuppressBlank: " " and eot at the start
        if with_timestamps:
            assert np.isneginf(filt[:, 27]).all()  # <|notimestamps|>
            if i == 0:  # only <|0.00|>: max_initial_timestamp 1.0 s at 3 s per position rounds to 0
                assert kept.sum(1).tolist() == [1, 1] and kept[:, 28].all()
        if greedy:
            nxt = filt.argmax(-1)
        else:  # sampled (Categorical): read the choice back, it must be an allowed token
            nxt = np.array([(x.tokens + [20] * 9)[i] for x in results])
            assert all(np.isfinite(filt[b, nxt[b]]) for b in range(2) if not finished[b])
        lp = _log_softmax(filt.astype(np.float64))
        for b in range(2):
            if finished[b]:
                nxt[b] = 20
            else:
                sum_lp[b] += lp[b, nxt[b]]
            seqs[b].append(int(nxt[b]))
            finished[b] = finished[b] or nxt[b] == 20
        if all(finished):
            break
    for b, res in enumerate(results):
        seq = seqs[b][L0:] + [20]
        out = seq[: seq.index(20)]
        assert res.tokens == out and res.language == "en"
        assert res.text == "".join(chr(97 + t) for t in out if t < 20)
        np.testing.assert_allclose(res.avg_logprob, sum_lp[b] / (len(out) + 1), rtol=1e-5)
        p0 = rec.raw[0][b, task.sot_index].cpu().numpy().astype(np.float64)
        np.testing.assert_allclose(res.no_speech_prob, np.exp(_log_softmax(p0))[26], rtol=1e-5)
        assert res.compression_ratio > 0
        if with_timestamps:  # timestamps come in pairs and never decrease
            ts = [t for t in out if t >= 28]
            assert out[0] == 28 and ts == sorted(ts)
    return [res.tokens for res in results], [res.avg_logprob for res in results]


def test_whisper_greedy_decoding_with_kv_cache():
    r = whisper_decode_run(lucid)
    _check_decode(lucid, r, True)
    D = whisper_decoding_page(lucid)  # decode() of one 2-D mel gives one result, the batch's first
    one = D.decode(r.model, r.mel[0], _TOK, D.DecodingOptions(language="en", fp16=False))
    assert isinstance(one, D.DecodingResult) and one.tokens == r.results[0].tokens
    np.testing.assert_allclose(one.avg_logprob, r.results[0].avg_logprob, rtol=1e-5)
    r = whisper_decode_run(lucid, sdpa=False, without_timestamps=True)
    _check_decode(lucid, r, False)
    assert r.task.logit_filters[-1].__class__.__name__ == "SuppressTokens"
    lucid.manual_seed(3)  # temperature > 0: GreedyDecoder samples from Categorical(logits / T)
    r = whisper_decode_run(lucid, temperature=1.0)
    _check_decode(lucid, r, True, greedy=False)
    assert r.results[0].temperature == 1.0


def _check_beam(torch, r):
    """Each beam-search result's score against a teacher-forced recompute without the cache
    (the same logit filters applied to the full decoder's logits at every prefix)."""
    task = r.task
    assert r.hooks_left == 0 and tuple(r.rec.raw[0].shape[:2]) == (4, task.sample_begin)  # 2 audio x 2 beams
    for b, res in enumerate(r.results):
        out, prefix, total = res.tokens, list(task.initial_tokens), 0.0
        for k in range(len(out) + 1):
            tokens = torch.tensor([prefix])
            with torch.no_grad():
                lg = r.model.logits(tokens, r.feats[b : b + 1])[:, -1].clone()
            for f in task.logit_filters:
                f.apply(lg, tokens)
            lp = _log_softmax(lg.cpu().numpy().astype(np.float64))[0]
            if k < len(out):
                assert np.isfinite(lp[out[k]])
                total += lp[out[k]]
                prefix.append(out[k])
        score = res.avg_logprob * (len(out) + 1)
        # a finished beam's score includes its eot; an unfinished one's (added by finalize) does not
        assert min(abs(score - total), abs(score - total - lp[20])) < 1e-4, (score, total, lp[20])
    return [res.tokens for res in r.results]


def test_whisper_beam_search_with_kv_cache():
    for opts in ({}, {"without_timestamps": True, "patience": 2.0}):
        r = whisper_decode_run(lucid, beam_size=2, **opts)
        assert type(r.task.decoder).__name__ == "BeamSearchDecoder"
        _check_beam(lucid, r)


def _np_median_filter(x, width):
    p = width // 2
    x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(p, p)], mode="reflect")
    return np.median(np.lib.stride_tricks.sliding_window_view(x, width, axis=-1), axis=-1)


def whisper_alignment_run(torch):
    M, model = _whisper(torch)
    T = whisper_timing_page(torch, M)
    mel = _mels(torch, whisper_audio_page(torch))[1]
    seen = {}
    hooks = [blk.cross_attn.register_forward_hook(lambda m, ins, outs, i=i: seen.__setitem__(i, (ins, outs)))
             for i, blk in enumerate(model.decoder.blocks)]
    text = [5, 6, 7, 8, 9]
    words = T.find_alignment(model, _TOK, text, mel, 20)
    for h in hooks:
        h.remove()
    tokens = [21, 24, 27, *text, 20]
    with torch.no_grad():
        logits = model(mel.unsqueeze(0), torch.tensor([tokens]))[0].cpu().numpy().astype(np.float64)
    qks = []
    for i, blk in enumerate(model.decoder.blocks):
        (ln_x, xa), outs = seen[i]
        W = _sd64(blk.cross_attn)
        q = _np(ln_x)[0].astype(np.float64) @ W["query.weight"].T + W["query.bias"]
        k = _np(xa)[0].astype(np.float64) @ W["key.weight"].T
        q, k = q.reshape(len(tokens), 2, 8).transpose(1, 0, 2), k.reshape(10, 2, 8).transpose(1, 0, 2)
        qk = q @ k.transpose(0, 2, 1) / math.sqrt(8)
        np.testing.assert_allclose(_np(outs[1][0]), qk, rtol=1e-4, atol=1e-4)  # the manual path's scores
        qks.append(_np(outs[1][0]).astype(np.float64))
    return T, words, qks, logits


def test_whisper_find_alignment():
    T, words, qks, logits = whisper_alignment_run(lucid)
    x = np.random.default_rng(0).standard_normal((2, 3, 9)).astype(np.float32)
    for w in (3, 5):
        np.testing.assert_allclose(T.median_filter(lucid.tensor(x), w).cpu().numpy(), _np_median_filter(x, w))
        np.testing.assert_allclose(T.median_filter(lucid.tensor(x[0, 0]), w).cpu().numpy(),  # 1-D: x[None, None]
                                   _np_median_filter(x[0, 0], w))
    # the pipeline again in NumPy from the scores the hooks saw (alignment heads: layer 1, heads 0 and 1)
    wts = np.stack([qks[1][0], qks[1][1]])[:, :, :10]
    wts = np.exp(wts - wts.max(-1, keepdims=True))
    wts /= wts.sum(-1, keepdims=True)
    wts = (wts - wts.mean(-2, keepdims=True)) / wts.std(-2, keepdims=True)
    matrix = _np_median_filter(wts, 7).mean(0)[2:-1]
    ti, tm = T.dtw_cpu(-matrix)
    jumps = np.pad(np.diff(ti), (1, 0), constant_values=1).astype(bool)
    jt = tm[jumps] / 50
    p = np.exp(_log_softmax(logits[2:, :20]))[np.arange(5), [5, 6, 7, 8, 9]]
    assert [w.word for w in words] == [" fg", " hi", " j"]  # the eot "word" has no boundary after it
    assert [w.tokens for w in words] == [[5, 6], [7, 8], [9]]
    bounds = [0, 2, 4, 5]
    starts, ends = jt[bounds[:-1]], jt[bounds[1:]]
    np.testing.assert_allclose([w.start for w in words], starts)
    np.testing.assert_allclose([w.end for w in words], ends)
    np.testing.assert_allclose([w.probability for w in words], [p[0:2].mean(), p[2:4].mean(), p[4]], rtol=1e-5)


def test_whisper_decoding_in_float16():
    # the default fp16=True: mel.half() through float32 weights, which the Conv1d/Linear/LayerNorm
    # subclasses cast to the input's dtype (Conv1d through its _conv_forward override)
    r32 = whisper_decode_run(lucid)
    r16 = whisper_decode_run(lucid, fp16=True)
    assert r32.feats.dtype == lucid.float32 and r16.feats.dtype == lucid.float16
    assert all(x.audio_features.dtype == lucid.float16 for x in r16.results)
    np.testing.assert_allclose(r16.feats.float().cpu().numpy(), r32.feats.cpu().numpy(), atol=1e-2)
    np.testing.assert_allclose(r16.rec.raw[0].cpu().numpy(), r32.rec.raw[0].cpu().numpy(), atol=1e-2)
    _check_decode(lucid, r16, True, tol=1e-2)


def test_conv_forward_is_the_override_point():
    # PyTorch's Conv1d/2d/3d.forward is self._conv_forward(input, self.weight, self.bias); Lucid's
    # forward called the convolution directly, so Whisper's Conv1d override (casting the weight to
    # the input's dtype) was skipped and a float16 mel raised a dtype mismatch
    seen = []

    def make(base):
        class Scaled(base):
            def _conv_forward(self, x, weight, bias):
                seen.append(type(self).__mro__[1].__name__)
                return super()._conv_forward(x, 2 * weight, None if bias is None else bias.to(x.dtype))
        return Scaled

    rng = np.random.default_rng(0)
    for nsp, base in ((1, lucid.nn.Conv1d), (2, lucid.nn.Conv2d), (3, lucid.nn.Conv3d)):
        for mode in ("zeros", "circular"):
            plain = base(2, 3, 3, padding=1, padding_mode=mode)
            scaled = make(base)(2, 3, 3, padding=1, padding_mode=mode)
            scaled.load_state_dict(plain.state_dict())
            x = lucid.tensor(rng.standard_normal((1, 2) + (4,) * nsp).astype(np.float32))
            b = plain.bias.detach().cpu().numpy().reshape((1, 3) + (1,) * nsp)
            got, ref = scaled(x).detach().cpu().numpy(), plain(x).detach().cpu().numpy()
            np.testing.assert_allclose(got - b, 2 * (ref - b), rtol=1e-5, atol=1e-5)
    assert seen == ["Conv1d", "Conv1d", "Conv2d", "Conv2d", "Conv3d", "Conv3d"]
    M = whisper_model_page(lucid)
    conv = M.Conv1d(4, 2, kernel_size=3, padding=1)  # float32 weights, a float16 input
    y = conv(lucid.ones(1, 4, 5, dtype=lucid.float16))
    assert y.dtype == lucid.float16
    w = conv.weight.detach().cpu().numpy().astype(np.float16).astype(np.float32)
    ref = np.stack([w[:, :, max(0, 1 - i):3 - max(0, i + 2 - 5)].sum((1, 2)) for i in range(5)], 1)
    ref += conv.bias.detach().cpu().numpy().astype(np.float16)[:, None]
    np.testing.assert_allclose(y.float().cpu().numpy()[0], ref, rtol=2e-3, atol=2e-3)


def whisper_training_run(torch, sdpa, steps=4):
    """Teacher-forced next-token cross-entropy through encoder and decoder (mel from audio)."""
    M, model = _whisper(torch, sdpa=sdpa)
    model.train()
    mel = _mels(torch, whisper_audio_page(torch))
    tokens = torch.tensor([[21, 24, 5, 6, 7, 8, 20], [21, 24, 9, 9, 1, 2, 20]])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses, grads = [], None
    for _ in range(steps):
        logits = model(mel, tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 36), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        grads = grads or {k: _np(p.grad) for k, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, grads


def test_whisper_teacher_forced_training():
    l_sdpa, g_sdpa = whisper_training_run(lucid, True)
    l_man, g_man = whisper_training_run(lucid, False)
    assert l_sdpa[-1] < 0.6 * l_sdpa[0], l_sdpa  # 4 Adam steps
    # the SDPA (is_causal) and the manual (additive -inf mask) paths: same loss and gradients
    np.testing.assert_allclose(l_sdpa[0], l_man[0], rtol=1e-5)
    for k in g_sdpa:
        np.testing.assert_allclose(g_sdpa[k], g_man[k], rtol=1e-3, atol=1e-5 * np.abs(g_man[k]).max(), err_msg=k)


def test_whisper_logit_filters_closed_form():
    D = whisper_decoding_page(lucid)
    rules = D.ApplyTimestampRules(_TOK, 2, None)
    logits = lucid.zeros(3, 36)
    logits[:, 29:] = -5.0  # text tokens more likely than any late timestamp
    tokens = lucid.tensor([[21, 24, 5, 30],       # timestamp after text: next cannot be text
                           [21, 24, 30, 31],      # two timestamps: next cannot be a timestamp
                           [21, 24, 29, 6]])      # timestamps never decrease: nothing before 30
    rules.apply(logits, tokens)
    g = np.isneginf(logits.cpu().numpy())
    assert g[:, 27].all()  # <|notimestamps|>
    assert g[0, :20].all() and not g[0, 20] and g[0, 28:30].all() and not g[0, 30:].any()
    assert not g[1, :20].any() and g[1, 28:].all()
    assert not g[2, :20].any() and g[2, 28:30].all() and not g[2, 30:].any()
    # at the start: text suppressed, and timestamps beyond the initial limit too
    logits = lucid.zeros(1, 36)
    D.ApplyTimestampRules(_TOK, 2, 3).apply(logits, lucid.tensor([[21, 24]]))
    assert np.isfinite(logits.cpu().numpy()[0]).nonzero()[0].tolist() == [28, 29, 30, 31]
    # the total timestamp probability wins over the best text token: text gets suppressed
    logits = lucid.zeros(1, 36)
    logits[0, 28:] = 0.5
    D.ApplyTimestampRules(_TOK, 2, None).apply(logits, lucid.tensor([[21, 24, 5]]))
    assert np.isfinite(logits.cpu().numpy()[0]).nonzero()[0].tolist() == list(range(28, 36))
    logits = lucid.zeros(2, 36)
    D.SuppressBlank(_TOK, 2).apply(logits, lucid.tensor([[21, 24]] * 2))
    D.SuppressTokens([3, 7]).apply(logits, lucid.tensor([[21, 24]] * 2))
    assert np.isneginf(logits.cpu().numpy()).nonzero()[1].tolist() == [1, 3, 7, 20] * 2
    # GreedyDecoder.update / finalize on a hand-made step
    dec = D.GreedyDecoder(0.0, 20)
    toks = lucid.tensor([[21, 5], [21, 20]])
    lg = lucid.tensor([[0.0, 2.0, 1.0] + [0.0] * 33, [3.0] + [0.0] * 35])
    slp = lucid.zeros(2)
    toks, done = dec.update(toks, lg, slp)
    assert toks.tolist() == [[21, 5, 1], [21, 20, 20]] and not bool(done)
    ref = _log_softmax(lg.cpu().numpy().astype(np.float64))[0, 1]
    np.testing.assert_allclose(slp.cpu().numpy(), [ref, 0.0], rtol=1e-6)
    fin, lps = dec.finalize(toks, slp)
    assert fin.tolist() == [[21, 5, 1, 20], [21, 20, 20, 20]] and isinstance(lps, list)
    assert D.MaximumLikelihoodRanker(None).rank([[[1, 2], [1]]], [[-1.0, -0.6]]) == [0]
    assert D.MaximumLikelihoodRanker(1.0).rank([[[1, 2], [1]]], [[-1.0, -0.6]]) == [1]
    with pytest.raises(ValueError, match="best_of with greedy"):
        D.DecodingTask(None, D.DecodingOptions(best_of=2), _TOK)


def _fd_spot_check(loss_fn, params, picks, eps=1e-6, rtol=1e-6, atol=1e-9):
    """Central finite differences in float64 at a few entries of each parameter."""
    for p in params:
        p.grad = None
    loss_fn().backward()
    for p, idxs in zip(params, picks):
        g = p.grad.cpu().numpy()
        for idx in idxs:
            with lucid.no_grad():
                old = p[idx].item()
                p[idx] = old + eps
                up = loss_fn().item()
                p[idx] = old - eps
                down = loss_fn().item()
                p[idx] = old
            np.testing.assert_allclose(g[idx], (up - down) / (2 * eps), rtol=rtol, atol=atol,
                                       err_msg=f"{tuple(p.shape)} {idx}")


def test_whisper_gradients_float64_finite_differences():
    M = whisper_model_page(lucid)
    lucid.manual_seed(0)
    attn = M.MultiHeadAttention(8, 2).double()
    conv = M.Conv1d(4, 8, kernel_size=3, stride=2, padding=1).double()
    _set_params(lucid, attn, 3)
    _set_params(lucid, conv, 4)
    rng = np.random.default_rng(5)
    x = lucid.tensor(rng.standard_normal((2, 5, 8)), requires_grad=True)
    xa = lucid.tensor(rng.standard_normal((2, 6, 8)), requires_grad=True)
    wave = lucid.tensor(rng.standard_normal((2, 4, 9)), requires_grad=True)
    R = lucid.tensor(rng.standard_normal((2, 5, 8)))
    mask = lucid.empty(6, 6, dtype=lucid.float64).fill_(-np.inf).triu_(1)

    def loss():  # SDPA path, causal self-attention and cross-attention, and the strided conv
        y = attn(x, mask=mask)[0] + attn(x, xa)[0]
        return (y * R).sum() + (lucid.nn.functional.gelu(conv(wave)) ** 2).sum()

    picks = [[(0, 1, 2), (1, 4, 7)], [(1, 0, 3)], [(5, 1), (0, 7)], [(2, 3)], [(0, 0, 0), (1, 3, 2)]]
    _fd_spot_check(loss, [x, xa, attn.key.weight, attn.query.weight, conv.weight], picks)
    assert x.grad is not None and conv.bias.grad is not None


# ---------------------------------------------------------------------------------------------
# clip/model.py


def clip_model_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride=1):
            super().__init__()

            # all conv layers have stride 1. an avgpool is performed after the second convolution when stride > 1
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)

            self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)

            self.avgpool = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()

            self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * self.expansion)

            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            self.stride = stride

            if stride > 1 or inplanes != planes * Bottleneck.expansion:
                # downsampling layer is prepended with an avgpool, and the subsequent convolution has stride 1
                self.downsample = nn.Sequential(OrderedDict([
                    ("-1", nn.AvgPool2d(stride)),
                    ("0", nn.Conv2d(inplanes, planes * self.expansion, 1, stride=1, bias=False)),
                    ("1", nn.BatchNorm2d(planes * self.expansion))
                ]))

        def forward(self, x: torch.Tensor):
            identity = x

            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.avgpool(out)
            out = self.bn3(self.conv3(out))

            if self.downsample is not None:
                identity = self.downsample(x)

            out += identity
            out = self.relu(out)
            return out

    class AttentionPool2d(nn.Module):
        def __init__(self, spacial_dim: int, embed_dim: int, num_heads: int, output_dim: int = None):
            super().__init__()
            self.positional_embedding = nn.Parameter(torch.randn(spacial_dim ** 2 + 1, embed_dim) / embed_dim ** 0.5)
            self.k_proj = nn.Linear(embed_dim, embed_dim)
            self.q_proj = nn.Linear(embed_dim, embed_dim)
            self.v_proj = nn.Linear(embed_dim, embed_dim)
            self.c_proj = nn.Linear(embed_dim, output_dim or embed_dim)
            self.num_heads = num_heads

        def forward(self, x):
            x = x.reshape(x.shape[0], x.shape[1], x.shape[2] * x.shape[3]).permute(2, 0, 1)  # NCHW -> (HW)NC
            x = torch.cat([x.mean(dim=0, keepdim=True), x], dim=0)  # (HW+1)NC
            x = x + self.positional_embedding[:, None, :].to(x.dtype)  # (HW+1)NC
            x, _ = F.multi_head_attention_forward(
                query=x, key=x, value=x,
                embed_dim_to_check=x.shape[-1],
                num_heads=self.num_heads,
                q_proj_weight=self.q_proj.weight,
                k_proj_weight=self.k_proj.weight,
                v_proj_weight=self.v_proj.weight,
                in_proj_weight=None,
                in_proj_bias=torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]),
                bias_k=None,
                bias_v=None,
                add_zero_attn=False,
                dropout_p=0,
                out_proj_weight=self.c_proj.weight,
                out_proj_bias=self.c_proj.bias,
                use_separate_proj_weight=True,
                training=self.training,
                need_weights=False
            )

            return x[0]

    class ModifiedResNet(nn.Module):
        """
        A ResNet class that is similar to torchvision's but contains the following changes:
        - There are now 3 "stem" convolutions as opposed to 1, with an average pool instead of a max pool.
        - Performs anti-aliasing strided convolutions, where an avgpool is prepended to convolutions with stride > 1
        - The final pooling layer is a QKV attention instead of an average pool
        """

        def __init__(self, layers, output_dim, heads, input_resolution=224, width=64):
            super().__init__()
            self.output_dim = output_dim
            self.input_resolution = input_resolution

            # the 3-layer stem
            self.conv1 = nn.Conv2d(3, width // 2, kernel_size=3, stride=2, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(width // 2)
            self.conv2 = nn.Conv2d(width // 2, width // 2, kernel_size=3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width // 2)
            self.conv3 = nn.Conv2d(width // 2, width, kernel_size=3, padding=1, bias=False)
            self.bn3 = nn.BatchNorm2d(width)
            self.avgpool = nn.AvgPool2d(2)
            self.relu = nn.ReLU(inplace=True)

            # residual layers
            self._inplanes = width  # this is a *mutable* variable used during construction
            self.layer1 = self._make_layer(width, layers[0])
            self.layer2 = self._make_layer(width * 2, layers[1], stride=2)
            self.layer3 = self._make_layer(width * 4, layers[2], stride=2)
            self.layer4 = self._make_layer(width * 8, layers[3], stride=2)

            embed_dim = width * 32  # the ResNet feature dimension
            self.attnpool = AttentionPool2d(input_resolution // 32, embed_dim, heads, output_dim)

        def _make_layer(self, planes, blocks, stride=1):
            layers = [Bottleneck(self._inplanes, planes, stride)]

            self._inplanes = planes * Bottleneck.expansion
            for _ in range(1, blocks):
                layers.append(Bottleneck(self._inplanes, planes))

            return nn.Sequential(*layers)

        def forward(self, x):
            def stem(x):
                for conv, bn in [(self.conv1, self.bn1), (self.conv2, self.bn2), (self.conv3, self.bn3)]:
                    x = self.relu(bn(conv(x)))
                x = self.avgpool(x)
                return x

            x = x.type(self.conv1.weight.dtype)
            x = stem(x)
            x = self.layer1(x)
            x = self.layer2(x)
            x = self.layer3(x)
            x = self.layer4(x)
            x = self.attnpool(x)

            return x

    class LayerNorm(nn.LayerNorm):
        """Subclass torch's LayerNorm to handle fp16."""

        def forward(self, x: torch.Tensor):
            orig_type = x.dtype
            ret = super().forward(x.type(torch.float32))
            return ret.type(orig_type)

    class QuickGELU(nn.Module):
        def forward(self, x: torch.Tensor):
            return x * torch.sigmoid(1.702 * x)

    class ResidualAttentionBlock(nn.Module):
        def __init__(self, d_model: int, n_head: int, attn_mask: torch.Tensor = None):
            super().__init__()

            self.attn = nn.MultiheadAttention(d_model, n_head)
            self.ln_1 = LayerNorm(d_model)
            self.mlp = nn.Sequential(OrderedDict([
                ("c_fc", nn.Linear(d_model, d_model * 4)),
                ("gelu", QuickGELU()),
                ("c_proj", nn.Linear(d_model * 4, d_model))
            ]))
            self.ln_2 = LayerNorm(d_model)
            self.attn_mask = attn_mask

        def attention(self, x: torch.Tensor):
            self.attn_mask = self.attn_mask.to(dtype=x.dtype, device=x.device) if self.attn_mask is not None else None
            return self.attn(x, x, x, need_weights=False, attn_mask=self.attn_mask)[0]

        def forward(self, x: torch.Tensor):
            x = x + self.attention(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    class Transformer(nn.Module):
        def __init__(self, width: int, layers: int, heads: int, attn_mask: torch.Tensor = None):
            super().__init__()
            self.width = width
            self.layers = layers
            self.resblocks = nn.Sequential(*[ResidualAttentionBlock(width, heads, attn_mask) for _ in range(layers)])

        def forward(self, x: torch.Tensor):
            return self.resblocks(x)

    class VisionTransformer(nn.Module):
        def __init__(self, input_resolution: int, patch_size: int, width: int, layers: int, heads: int, output_dim: int):
            super().__init__()
            self.input_resolution = input_resolution
            self.output_dim = output_dim
            self.conv1 = nn.Conv2d(in_channels=3, out_channels=width, kernel_size=patch_size, stride=patch_size, bias=False)

            scale = width ** -0.5
            self.class_embedding = nn.Parameter(scale * torch.randn(width))
            self.positional_embedding = nn.Parameter(scale * torch.randn((input_resolution // patch_size) ** 2 + 1, width))
            self.ln_pre = LayerNorm(width)

            self.transformer = Transformer(width, layers, heads)

            self.ln_post = LayerNorm(width)
            self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

        def forward(self, x: torch.Tensor):
            x = self.conv1(x)  # shape = [*, width, grid, grid]
            x = x.reshape(x.shape[0], x.shape[1], -1)  # shape = [*, width, grid ** 2]
            x = x.permute(0, 2, 1)  # shape = [*, grid ** 2, width]
            x = torch.cat([self.class_embedding.to(x.dtype) + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype, device=x.device), x], dim=1)  # shape = [*, grid ** 2 + 1, width]
            x = x + self.positional_embedding.to(x.dtype)
            x = self.ln_pre(x)

            x = x.permute(1, 0, 2)  # NLD -> LND
            x = self.transformer(x)
            x = x.permute(1, 0, 2)  # LND -> NLD

            x = self.ln_post(x[:, 0, :])

            if self.proj is not None:
                x = x @ self.proj

            return x

    class CLIP(nn.Module):
        def __init__(self,
                     embed_dim: int,
                     # vision
                     image_resolution: int,
                     vision_layers: Union[Tuple[int, int, int, int], int],
                     vision_width: int,
                     vision_patch_size: int,
                     # text
                     context_length: int,
                     vocab_size: int,
                     transformer_width: int,
                     transformer_heads: int,
                     transformer_layers: int
                     ):
            super().__init__()

            self.context_length = context_length

            if isinstance(vision_layers, (tuple, list)):
                vision_heads = vision_width * 32 // 64
                self.visual = ModifiedResNet(
                    layers=vision_layers,
                    output_dim=embed_dim,
                    heads=vision_heads,
                    input_resolution=image_resolution,
                    width=vision_width
                )
            else:
                vision_heads = vision_width // 64
                self.visual = VisionTransformer(
                    input_resolution=image_resolution,
                    patch_size=vision_patch_size,
                    width=vision_width,
                    layers=vision_layers,
                    heads=vision_heads,
                    output_dim=embed_dim
                )

            self.transformer = Transformer(
                width=transformer_width,
                layers=transformer_layers,
                heads=transformer_heads,
                attn_mask=self.build_attention_mask()
            )

            self.vocab_size = vocab_size
            self.token_embedding = nn.Embedding(vocab_size, transformer_width)
            self.positional_embedding = nn.Parameter(torch.empty(self.context_length, transformer_width))
            self.ln_final = LayerNorm(transformer_width)

            self.text_projection = nn.Parameter(torch.empty(transformer_width, embed_dim))
            self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))

            self.initialize_parameters()

        def initialize_parameters(self):
            nn.init.normal_(self.token_embedding.weight, std=0.02)
            nn.init.normal_(self.positional_embedding, std=0.01)

            if isinstance(self.visual, ModifiedResNet):
                if self.visual.attnpool is not None:
                    std = self.visual.attnpool.c_proj.in_features ** -0.5
                    nn.init.normal_(self.visual.attnpool.q_proj.weight, std=std)
                    nn.init.normal_(self.visual.attnpool.k_proj.weight, std=std)
                    nn.init.normal_(self.visual.attnpool.v_proj.weight, std=std)
                    nn.init.normal_(self.visual.attnpool.c_proj.weight, std=std)

                for resnet_block in [self.visual.layer1, self.visual.layer2, self.visual.layer3, self.visual.layer4]:
                    for name, param in resnet_block.named_parameters():
                        if name.endswith("bn3.weight"):
                            nn.init.zeros_(param)

            proj_std = (self.transformer.width ** -0.5) * ((2 * self.transformer.layers) ** -0.5)
            attn_std = self.transformer.width ** -0.5
            fc_std = (2 * self.transformer.width) ** -0.5
            for block in self.transformer.resblocks:
                nn.init.normal_(block.attn.in_proj_weight, std=attn_std)
                nn.init.normal_(block.attn.out_proj.weight, std=proj_std)
                nn.init.normal_(block.mlp.c_fc.weight, std=fc_std)
                nn.init.normal_(block.mlp.c_proj.weight, std=proj_std)

            if self.text_projection is not None:
                nn.init.normal_(self.text_projection, std=self.transformer.width ** -0.5)

        def build_attention_mask(self):
            # lazily create causal attention mask, with full attention between the vision tokens
            # pytorch uses additive attention mask; fill with -inf
            mask = torch.empty(self.context_length, self.context_length)
            mask.fill_(float("-inf"))
            mask.triu_(1)  # zero out the lower diagonal
            return mask

        @property
        def dtype(self):
            return self.visual.conv1.weight.dtype

        def encode_image(self, image):
            return self.visual(image.type(self.dtype))

        def encode_text(self, text):
            x = self.token_embedding(text).type(self.dtype)  # [batch_size, n_ctx, d_model]

            x = x + self.positional_embedding.type(self.dtype)
            x = x.permute(1, 0, 2)  # NLD -> LND
            x = self.transformer(x)
            x = x.permute(1, 0, 2)  # LND -> NLD
            x = self.ln_final(x).type(self.dtype)

            # x.shape = [batch_size, n_ctx, transformer.width]
            # take features from the eot embedding (eot_token is the highest number in each sequence)
            x = x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection

            return x

        def forward(self, image, text):
            image_features = self.encode_image(image)
            text_features = self.encode_text(text)

            # normalized features
            image_features = image_features / image_features.norm(dim=-1, keepdim=True)
            text_features = text_features / text_features.norm(dim=-1, keepdim=True)

            # cosine similarity as logits
            logit_scale = self.logit_scale.exp()
            logits_per_image = logit_scale * image_features @ text_features.t()
            logits_per_text = logit_scale * text_features @ image_features.t()

            # shape = [global_batch_size, global_batch_size]
            return logits_per_image, logits_per_text

    def convert_weights(model: nn.Module):
        """Convert applicable model parameters to fp16"""

        def _convert_weights_to_fp16(l):
            if isinstance(l, (nn.Conv1d, nn.Conv2d, nn.Linear)):
                l.weight.data = l.weight.data.half()
                if l.bias is not None:
                    l.bias.data = l.bias.data.half()

            if isinstance(l, nn.MultiheadAttention):
                for attr in [*[f"{s}_proj_weight" for s in ["in", "q", "k", "v"]], "in_proj_bias", "bias_k", "bias_v"]:
                    tensor = getattr(l, attr)
                    if tensor is not None:
                        tensor.data = tensor.data.half()

            for name in ["text_projection", "proj"]:
                if hasattr(l, name):
                    attr = getattr(l, name)
                    if attr is not None:
                        attr.data = attr.data.half()

        model.apply(_convert_weights_to_fp16)

    def build_model(state_dict: dict):
        vit = "visual.proj" in state_dict

        if vit:
            vision_width = state_dict["visual.conv1.weight"].shape[0]
            vision_layers = len([k for k in state_dict.keys() if k.startswith("visual.") and k.endswith(".attn.in_proj_weight")])
            vision_patch_size = state_dict["visual.conv1.weight"].shape[-1]
            grid_size = round((state_dict["visual.positional_embedding"].shape[0] - 1) ** 0.5)
            image_resolution = vision_patch_size * grid_size
        else:
            counts: list = [len(set(k.split(".")[2] for k in state_dict if k.startswith(f"visual.layer{b}"))) for b in [1, 2, 3, 4]]
            vision_layers = tuple(counts)
            vision_width = state_dict["visual.layer1.0.conv1.weight"].shape[0]
            output_width = round((state_dict["visual.attnpool.positional_embedding"].shape[0] - 1) ** 0.5)
            vision_patch_size = None
            assert output_width ** 2 + 1 == state_dict["visual.attnpool.positional_embedding"].shape[0]
            image_resolution = output_width * 32

        embed_dim = state_dict["text_projection"].shape[1]
        context_length = state_dict["positional_embedding"].shape[0]
        vocab_size = state_dict["token_embedding.weight"].shape[0]
        transformer_width = state_dict["ln_final.weight"].shape[0]
        transformer_heads = transformer_width // 64
        transformer_layers = len(set(k.split(".")[2] for k in state_dict if k.startswith(f"transformer.resblocks")))

        model = CLIP(
            embed_dim,
            image_resolution, vision_layers, vision_width, vision_patch_size,
            context_length, vocab_size, transformer_width, transformer_heads, transformer_layers
        )

        for key in ["input_resolution", "context_length", "vocab_size"]:
            if key in state_dict:
                del state_dict[key]

        convert_weights(model)
        model.load_state_dict(state_dict)
        return model.eval()

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_")})


_CLIP_TEXT = dict(context_length=6, vocab_size=20, transformer_width=64, transformer_heads=1, transformer_layers=1)
_CLIP_VIT = dict(embed_dim=16, image_resolution=16, vision_layers=1, vision_width=64, vision_patch_size=8)
_CLIP_RN = dict(embed_dim=16, image_resolution=32, vision_layers=(1, 1, 1, 1), vision_width=4, vision_patch_size=None)


def _clip(torch, vit=True, seed=0):
    C = clip_model_page(torch)
    torch.manual_seed(0)
    model = C.CLIP(**(_CLIP_VIT if vit else _CLIP_RN), **_CLIP_TEXT)
    _set_params(torch, model, seed, keep=("logit_scale",))
    return C, model


def _clip_data(torch, vit=True, n=4, seed=7):
    rng = np.random.default_rng(seed)
    res = 16 if vit else 32
    image = torch.tensor(rng.standard_normal((n, 3, res, res)).astype(np.float32))
    text = rng.integers(1, 18, (n, 6))
    for i, j in enumerate([5, 3, 4, 2, 5, 1][:n]):
        text[i, j] = 19  # eot is the highest id; zeros after it
        text[i, j + 1:] = 0
    return image, torch.tensor(text)


def _np_attnpool(x, W, heads):
    """CLIP's AttentionPool2d in NumPy float64: the query of the mean token over all tokens."""
    N, C, H, Wd = x.shape
    t = x.reshape(N, C, H * Wd).transpose(2, 0, 1)
    t = np.concatenate([t.mean(0, keepdims=True), t], 0) + W["positional_embedding"][:, None, :]
    proj = lambda n: t @ W[n + ".weight"].T + W[n + ".bias"]
    q, k, v = proj("q_proj"), proj("k_proj"), proj("v_proj")
    d = C // heads
    out = np.zeros((N, C))
    for h in range(heads):
        sl = slice(h * d, (h + 1) * d)
        s = np.einsum("nd,lnd->nl", q[0, :, sl], k[:, :, sl]) / math.sqrt(d)
        w = np.exp(s - s.max(1, keepdims=True))
        w /= w.sum(1, keepdims=True)
        out[:, sl] = np.einsum("nl,lnd->nd", w, v[:, :, sl])
    return out @ W["c_proj.weight"].T + W["c_proj.bias"]


# ---------------------------------------------------------------------------------------------
# CLIP tests


def test_clip_attention_pool_and_blocks_against_numpy():
    C = clip_model_page(lucid)
    lucid.manual_seed(0)
    pool = C.AttentionPool2d(2, 8, 2, 6)
    _set_params(lucid, pool, 1)
    x = np.random.default_rng(2).standard_normal((3, 8, 2, 2)).astype(np.float32)
    got = pool(lucid.tensor(x))
    assert tuple(got.shape) == (3, 6)
    np.testing.assert_allclose(got.detach().cpu().numpy(), _np_attnpool(x.astype(np.float64), _sd64(pool), 2),
                               rtol=1e-5, atol=1e-5)
    g = C.QuickGELU()(lucid.tensor([-1.0, 0.0, 2.0])).cpu().numpy()
    v = np.array([-1.0, 0.0, 2.0])
    np.testing.assert_allclose(g, v / (1 + np.exp(-1.702 * v)), rtol=1e-6)
    # the fp16 LayerNorm subclass: computes in float32, hands back float16
    ln = C.LayerNorm(4)
    h = lucid.tensor([[1.0, 2.0, 4.0, 8.0]], dtype=lucid.float16)
    out = ln(h)
    ref = (np.array([1, 2, 4, 8.0]) - 3.75) / np.sqrt(np.var([1, 2, 4, 8.0]) + 1e-5)
    assert out.dtype == lucid.float16
    np.testing.assert_allclose(out.cpu().float().numpy()[0], ref.astype(np.float16), rtol=1e-3)
    # a Bottleneck with stride 2: avgpool-prepended downsample
    blk = C.Bottleneck(4, 2, stride=2).eval()
    assert list(blk.downsample._modules) == ["-1", "0", "1"]
    y = blk(lucid.tensor(np.random.default_rng(3).standard_normal((1, 4, 4, 4)).astype(np.float32)))
    assert tuple(y.shape) == (1, 8, 2, 2) and (y.detach().cpu().numpy() >= 0).all()


def test_clip_logits_are_scaled_cosine_similarities():
    for vit in (True, False):
        C, model = _clip(lucid, vit)
        model.eval()
        image, text = _clip_data(lucid, vit)
        with lucid.no_grad():
            li, lt = model(image, text)
            fi = model.encode_image(image).cpu().numpy().astype(np.float64)
            ft = model.encode_text(text).cpu().numpy().astype(np.float64)
        assert tuple(fi.shape) == tuple(ft.shape) == (4, 16)
        fi /= np.linalg.norm(fi, axis=1, keepdims=True)
        ft /= np.linalg.norm(ft, axis=1, keepdims=True)
        np.testing.assert_allclose(li.cpu().numpy(), (1 / 0.07) * fi @ ft.T, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lt.cpu().numpy(), li.cpu().numpy().T, rtol=1e-6, atol=1e-6)
    # encode_text reads the eot position: tokens after it change nothing (causal mask)
    mask = model.transformer.resblocks[0].attn_mask.cpu().numpy()
    np.testing.assert_array_equal(mask, np.triu(np.full((6, 6), -np.inf), 1))
    other = text.clone()
    other[3, 3:] = 7  # row 3's eot is at position 2
    with lucid.no_grad():
        a, b = model.encode_text(text), model.encode_text(other)
    np.testing.assert_array_equal(a.cpu().numpy(), b.cpu().numpy())
    other[3, 1] = 7
    with lucid.no_grad():
        c = model.encode_text(other)
    assert np.abs(c[3].cpu().numpy() - a[3].cpu().numpy()).max() > 1e-4


def test_clip_build_model_round_trip_in_float16():
    for vit in (True, False):
        C, model = _clip(lucid, vit)
        model.eval()
        sd = model.state_dict()
        sd["input_resolution"] = lucid.tensor(16 if vit else 32)  # the JIT archive's extra entries
        sd["context_length"] = lucid.tensor(6)
        built = C.build_model(dict(sd))
        assert not built.training and built.context_length == 6 and built.vocab_size == 20
        assert built.transformer.width == 64 and built.transformer.layers == 1
        v = built.visual
        if vit:
            assert isinstance(v, C.VisionTransformer) and v.input_resolution == 16 and v.proj.shape == (64, 16)
            assert v.conv1.kernel_size == (8, 8) and len(v.transformer.resblocks) == 1
        else:
            assert isinstance(v, C.ModifiedResNet) and v.input_resolution == 32 and v.attnpool.num_heads == 2
            assert [len(getattr(v, f"layer{i}")) for i in range(1, 5)] == [1, 1, 1, 1]
        # convert_weights: convolutions, linears, attention projections and the projections in float16
        assert built.dtype == lucid.float16 and built.text_projection.dtype == lucid.float16
        blk = built.transformer.resblocks[0]
        assert blk.attn.in_proj_weight.dtype == blk.attn.out_proj.weight.dtype == lucid.float16
        assert blk.ln_1.weight.dtype == built.token_embedding.weight.dtype == lucid.float32
        sd2 = built.state_dict()
        assert sorted(sd2) == sorted(k for k in sd if k not in ("input_resolution", "context_length"))
        for k, t in sd2.items():
            np.testing.assert_array_equal(t.cpu().numpy(), sd[k].cpu().numpy().astype(t.cpu().numpy().dtype))
        image, text = _clip_data(lucid, vit)
        with lucid.no_grad():
            ref = model(image, text)[0].cpu().numpy()
            half = built(image, text)[0]
        assert half.dtype == lucid.float16
        np.testing.assert_allclose(half.cpu().float().numpy(), ref, rtol=0.02, atol=0.08)


def test_clip_gradients_float64_finite_differences():
    C = clip_model_page(lucid)
    lucid.manual_seed(0)
    pool = C.AttentionPool2d(2, 8, 2, 4).double()
    blk = C.ResidualAttentionBlock(8, 2, lucid.empty(3, 3).fill_(float("-inf")).triu_(1)).double()
    bott = C.Bottleneck(4, 1, stride=2).double()  # training mode: batch statistics
    for i, m in enumerate((pool, blk, bott)):
        _set_params(lucid, m, 10 + i)
    rng = np.random.default_rng(6)
    xp = lucid.tensor(rng.standard_normal((2, 8, 2, 2)), requires_grad=True)
    xs = lucid.tensor(rng.standard_normal((3, 2, 8)), requires_grad=True)
    xb = lucid.tensor(rng.standard_normal((2, 4, 4, 4)), requires_grad=True)
    R = [lucid.tensor(rng.standard_normal(s)) for s in ((2, 4), (3, 2, 8), (2, 4, 2, 2))]

    def loss():  # the block's sublayers without its LayerNorms, which compute in float32 by design
        y = blk.attention(xs) + blk.mlp(xs)
        return ((pool(xp) * R[0]).sum() + (y * R[1]).sum() + (bott(xb) * R[2]).sum())

    params = [xp, pool.q_proj.weight, pool.positional_embedding, xs, blk.attn.in_proj_weight,
              blk.mlp.c_fc.weight, xb, bott.conv2.weight, bott.downsample[2].weight]  # [2]: the BatchNorm "1"
    picks = [[(0, 1, 0, 1)], [(2, 5)], [(4, 3)], [(1, 0, 2)], [(20, 3), (3, 6)], [(11, 4)],
             [(1, 2, 3, 0)], [(0, 0, 1, 2)], [(2,)]]
    _fd_spot_check(loss, params, picks)


def clip_training_run(torch, steps=6, vit=True):
    C, model = _clip(torch, vit)
    image, text = _clip_data(torch, vit)
    F = torch.nn.functional
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    labels = torch.arange(4)
    losses, grads = [], None
    for _ in range(steps):
        logits_per_image, logits_per_text = model(image, text)
        loss = (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2
        opt.zero_grad()
        loss.backward()
        grads = grads or {k: _np(p.grad) for k, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, {k: _np(v) for k, v in model.state_dict().items()}, grads


def test_clip_contrastive_training():
    losses, _, _ = clip_training_run(lucid)
    assert losses[-1] < 0.5 * losses[0], losses
    losses, _, _ = clip_training_run(lucid, vit=False)  # ModifiedResNet: BatchNorm in training mode
    assert losses[-1] < 0.5 * losses[0], losses


# ---------------------------------------------------------------------------------------------
# parity with PyTorch


def test_whisper_torch_parity():
    torch = pytest.importorskip("torch")
    A_l, A_t = whisper_audio_page(lucid), whisper_audio_page(torch)
    audio = _audio(3000)
    np.testing.assert_allclose(A_l.log_mel_spectrogram(lucid.tensor(audio), padding=160).cpu().numpy(),
                               A_t.log_mel_spectrogram(torch.tensor(audio), padding=160).numpy(),
                               rtol=1e-5, atol=2e-5)
    for sdpa in (True, False):
        (M_l, m_l), (M_t, m_t) = _whisper(lucid, sdpa=sdpa), _whisper(torch, sdpa=sdpa)
        mel_l, mel_t = _mels(lucid, A_l), _mels(torch, A_t)
        tokens = [[21, 24, 5, 6, 7], [21, 24, 9, 9, 1]]
        with lucid.no_grad(), torch.no_grad():
            out_l = m_l(mel_l, lucid.tensor(tokens)).cpu().numpy()
            out_t = m_t(mel_t, torch.tensor(tokens)).numpy()
        np.testing.assert_allclose(out_l, out_t, rtol=1e-4, atol=1e-4)
    for sdpa in (True, False):
        (l_l, g_l), (l_t, g_t) = whisper_training_run(lucid, sdpa), whisper_training_run(torch, sdpa)
        np.testing.assert_allclose(l_l, l_t, rtol=1e-4)
        for k in g_t:
            np.testing.assert_allclose(g_l[k], g_t[k], rtol=1e-3, atol=1e-5 * np.abs(g_t[k]).max(), err_msg=k)
    for sdpa, opts in ((True, {}), (False, {"without_timestamps": True}), (True, {"fp16": True}),
                       (True, {"beam_size": 2, "without_timestamps": True})):
        # (with timestamps the first beam step ties at -inf: only <|0.00|> is allowed, and the two
        # libraries' topk pick different -inf tokens for the second beam)
        r_l, r_t = whisper_decode_run(lucid, sdpa, **opts), whisper_decode_run(torch, sdpa, **opts)
        assert [x.tokens for x in r_l.results] == [x.tokens for x in r_t.results]
        tol = 1e-2 if opts.get("fp16") else 1e-4  # float16: a few ulps of intermediate roundings
        np.testing.assert_allclose([x.avg_logprob for x in r_l.results], [x.avg_logprob for x in r_t.results],
                                   rtol=tol / 10)
        for a, b in zip(r_l.rec.raw, r_t.rec.raw):
            np.testing.assert_allclose(a.cpu().numpy(), b.numpy(), rtol=tol, atol=tol)


def test_whisper_find_alignment_torch_parity():
    torch = pytest.importorskip("torch")
    (_, w_l, q_l, lg_l), (_, w_t, q_t, lg_t) = whisper_alignment_run(lucid), whisper_alignment_run(torch)
    for a, b in zip(q_l, q_t):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lg_l, lg_t, rtol=1e-4, atol=1e-4)
    assert [(w.word, w.tokens, w.start, w.end) for w in w_l] == [(w.word, w.tokens, w.start, w.end) for w in w_t]
    np.testing.assert_allclose([w.probability for w in w_l], [w.probability for w in w_t], rtol=1e-5)


def test_clip_torch_parity():
    torch = pytest.importorskip("torch")
    for vit in (True, False):
        (C_l, m_l), (C_t, m_t) = _clip(lucid, vit), _clip(torch, vit)
        m_l.eval(), m_t.eval()
        (im_l, tx_l), (im_t, tx_t) = _clip_data(lucid, vit), _clip_data(torch, vit)
        with lucid.no_grad(), torch.no_grad():
            np.testing.assert_allclose(m_l(im_l, tx_l)[0].cpu().numpy(), m_t(im_t, tx_t)[0].numpy(),
                                       rtol=1e-4, atol=1e-4)
            h_l = C_l.build_model(dict(m_l.state_dict()))(im_l, tx_l)[0]
            h_t = C_t.build_model(dict(m_t.state_dict()))(im_t, tx_t)[0]
        assert h_l.dtype == lucid.float16 and h_t.dtype == torch.float16
        np.testing.assert_allclose(h_l.cpu().float().numpy(), h_t.float().numpy(), rtol=0.02, atol=0.06)
    def drop_key_bias(k, a, b):  # the key biases' true gradient is 0 (a shift of every score), so
        if k.endswith("attn.in_proj_bias"):  # both hold rounding noise, which Adam scales to lr-sized steps
            return np.delete(a, np.s_[64:128]), np.delete(b, np.s_[64:128])
        return (a[:0], b[:0]) if k.endswith("k_proj.bias") else (a, b)

    for vit in (True, False):
        n = 6 if vit else 3
        (l_l, s_l, g_l), (l_t, s_t, g_t) = clip_training_run(lucid, n, vit), clip_training_run(torch, n, vit)
        for k in g_t:  # the first step's gradients
            a, b = drop_key_bias(k, g_l[k], g_t[k])
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * np.abs(b).max(initial=0), err_msg=k)
        # the ResNet's trajectory: Adam's first steps (g / |g|) turn rounding-level gradient differences of
        # near-zero elements into lr-sized ones, so its losses drift apart by ~1e-4 within 3 steps
        np.testing.assert_allclose(l_l, l_t, rtol=1e-4 if vit else 3e-3, atol=1e-5)
        if vit:
            for k in s_t:
                np.testing.assert_allclose(*drop_key_bias(k, s_l[k], s_t[k]), rtol=1e-3, atol=1e-4, err_msg=k)
