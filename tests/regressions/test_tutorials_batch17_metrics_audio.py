"""Functional metrics of Lightning-AI/torchmetrics and audio functions of pytorch/audio run on Lucid
(``import lucid as torch``), batch 17:

- torchmetrics ``utilities/data.py`` (``dim_zero_cat``, ``_bincount`` with its deterministic
  ``arange``/``eq`` fallback, ``_flexible_bincount``, ``_cumsum``, ``to_onehot`` through ``scatter_``,
  ``select_topk`` with its float16 ``argsort(stable=True).flip`` branch) and ``utilities/compute.py``
  (``_safe_divide``, ``_safe_xlogy``, ``_adjust_weights_safe_divide``, ``_auc_compute`` through
  ``torch.trapz``, ``interp``).
- ``functional/classification``: ``stat_scores.py`` (binary thresholding with sigmoid of logits and
  ``ignore_index`` masked to -1; multiclass through the confusion matrix ``_bincount(target *
  num_classes + preds)``, the ``micro`` shortcut, the one-hot path for ``samplewise``/``top_k``;
  multilabel), ``confusion_matrix.py`` (normalisations), ``accuracy.py``/``precision_recall.py``/
  ``f_beta.py`` reductions (binary, micro, macro, weighted, none), ``precision_recall_curve.py``
  (``_binary_clf_curve``: ``argsort(descending)``, ``torch.where(diff)``, ``F.pad(value=)``,
  ``cumsum``, sample weights; the exact and the binned curve), ``roc.py``, ``auroc.py`` (trapezoid,
  ``max_fpr`` with ``bucketize``/``lerp`` and the McClish correction), ``average_precision.py``,
  ``calibration_error.py`` (``bucketize(right=True)``, ``scatter_add_``, ``nan_to_num``; l1/l2/max),
  the legacy ``matthews_corrcoef``/``cohen_kappa`` computes (Python ``sum`` over a tensor, strided
  ``w_mat[::n + 1] = 0``), ``ranking.py`` (``unique(return_inverse, return_counts)``, coverage error,
  label ranking average precision, ranking loss by ``argsort().argsort()``) and ``hinge.py``
  (Crammer-Singer and one-vs-all).
- ``functional/regression``: ``mean_squared_error``, ``r2_score`` (masked writes for constant
  targets, ``variance_weighted``, ``adjusted``), ``pearson_corrcoef`` (the streaming update over two
  batches; float16 through bfloat16), ``spearman_corrcoef`` (``_rank_data`` with ``_find_repeats``),
  ``explained_variance``, ``cosine_similarity`` and ``kl_divergence`` (``torch.sum(..., axis=-1)``).
- ``functional/audio``: ``signal_noise_ratio``, SI-SNR/SI-SDR, complex SI-SNR (``view_as_real``),
  ``signal_distortion_ratio`` (FFT correlations, ``_symmetric_toeplitz`` through an overlapping
  ``as_strided``, ``linalg.solve``) and ``permutation_invariant_training`` (exhaustive search with
  ``gather``) with ``pit_permutate``.
- torchaudio ``functional/functional.py``: ``spectrogram`` (``torch.stft`` with window, power, both
  normalizations), ``inverse_spectrogram`` (``istft``), ``griffinlim`` (momentum, complex
  ``torch.full``), ``amplitude_to_DB`` (``top_db`` per batch item via ``amax`` over three dims),
  ``DB_to_amplitude``, ``melscale_fbanks`` (htk and slaney scales, slaney norm), ``create_dct``,
  ``mu_law_encoding``/``decoding``, ``compute_deltas`` (replicate pad + grouped ``conv1d``),
  ``detect_pitch_frequency`` (NCCF through ``unfold``, median smoothing), ``spectral_centroid``,
  ``resample`` (``_get_sinc_resample_kernel``, Hann and Kaiser, + strided ``conv1d``),
  ``phase_vocoder`` (``angle``, ``polar``, complex ``index_select``), ``sliding_window_cmn``, ``psd``,
  ``mvdr_weights_souden``/``mvdr_weights_rtf``, ``rtf_evd`` (complex ``eigh``), ``rtf_power``,
  ``apply_beamforming`` (complex ``einsum``), ``fftconvolve``/``convolve``, ``add_noise``, ``speed``,
  ``preemphasis``/``deemphasis``; ``functional/filtering.py``: ``lfilter`` with its Python core loop
  (``o0 -= ...`` on rows of a permuted tensor), ``biquad``, low/high/all/band/band-pass and bass
  biquads, ``gain``, ``contrast``, ``dcshift`` (masked writes into its input), ``overdrive`` (its
  sample loop), ``phaser`` and ``_generate_wave_table``.

Each check is a NumPy recomputation or a closed form (the Mann-Whitney statistic for the AUROC,
ranks by counting for Spearman, a direct difference-equation loop for ``lfilter``, the dense sinc sum
for ``resample``, ``np.fft.rfft`` frames for the spectrogram, brute force over permutations for PIT,
the distortionless response of the MVDR beamformer), plus float64 finite differences through
``spectrogram`` -> ``melscale_fbanks`` -> ``amplitude_to_DB``, through ``lfilter`` and through the
complex pipelines (phase vocoder, Griffin-Lim, beamforming, ``eigh``, resampling); the
``*_torch_parity`` tests run the same text on PyTorch (values, dtypes, shapes, gradients).

Adapted: argument/tensor validation left out (the metrics are called as with
``validate_args=False``); ``_bincount``'s ``_XLA_AVAILABLE``/``is_mps`` branches kept as ``is_mps``;
``rank_zero_warn`` is ``warnings.warn``; ``torch.jit.isinstance`` is ``isinstance``; the stored
torchaudio ``lfilter`` is the pre-autograd-Function version whose core is ``_lfilter_core`` with the
generic loop (PyTorch refuses to differentiate that loop, "Output 0 of Unbind is a view and is being
modified inplace"; Lucid differentiates it, checked by finite differences); PIT's exhaustive search
is used for three speakers too (upstream hands those to scipy when installed). PyTorch's float32
``linspace`` differs from NumPy's (Lucid's) by an ulp, so grids that must hit 0 exactly come from
NumPy.

Fixed on the way: ``tensor[index] = value`` with an index out of range or a boolean mask of the wrong
shape raised NumPy's bare IndexError ("boolean index did not match indexed array along axis 1 ...")
without naming the op or the shapes; it now reads "setitem: ... (tensor shape (24, 4, 1), index tensor
shapes [(24, 1)], value shape ())", as ``getitem``'s errors do (met in torchmetrics' ``top_k > 1`` path
with an ``ignore_index`` outside the classes, which PyTorch refuses too).
"""
import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn.functional  # noqa: F401


def _np(t):
    return np.array(t.detach().cpu().numpy())  # a copy: .numpy() shares memory


_PAGES = {}


def _page(page, torch=lucid):
    """A page's Lucid results, computed once per run (several tests check one page; none changes them)."""
    if torch is not lucid:
        return page(torch)
    if page not in _PAGES:
        _PAGES[page] = page(lucid)
    return _PAGES[page]


# ================================================================ torchmetrics utilities
def tm_utils(torch):
    """utilities/data.py and utilities/compute.py."""
    Tensor = torch.Tensor

    def dim_zero_cat(x):
        """Concatenation along the zero dimension."""
        if isinstance(x, torch.Tensor):
            return x
        x = [y.unsqueeze(0) if y.numel() == 1 and y.ndim == 0 else y for y in x]
        if not x:  # empty list
            raise ValueError("No samples to concatenate")
        return torch.cat(x, dim=0)

    def to_onehot(label_tensor, num_classes=None):
        if num_classes is None:
            num_classes = int(label_tensor.max().detach().item() + 1)

        tensor_onehot = torch.zeros(
            label_tensor.shape[0],
            num_classes,
            *label_tensor.shape[1:],
            dtype=label_tensor.dtype,
            device=label_tensor.device,
        )
        index = label_tensor.long().unsqueeze(1).expand_as(tensor_onehot)
        return tensor_onehot.scatter_(1, index, 1.0)

    def _top_k_with_half_precision_support(x, k=1, dim=1):
        if x.dtype == torch.half and not x.is_cuda:
            idx = torch.argsort(x, dim=dim, stable=True).flip(dim)
            return idx.narrow(dim, 0, k)
        return x.topk(k=k, dim=dim).indices

    def select_topk(prob_tensor, topk=1, dim=1):
        topk_tensor = torch.zeros_like(prob_tensor, dtype=torch.int)
        if topk == 1:  # argmax has better performance than topk
            topk_tensor.scatter_(dim, prob_tensor.argmax(dim=dim, keepdim=True), 1.0)
        else:
            topk_tensor.scatter_(dim, _top_k_with_half_precision_support(prob_tensor, k=topk, dim=dim), 1.0)
        return topk_tensor.int()

    def _bincount(x, minlength=None):
        if minlength is None:
            minlength = len(torch.unique(x))

        if torch.are_deterministic_algorithms_enabled() or x.is_mps:
            mesh = torch.arange(minlength, device=x.device).repeat(len(x), 1)
            return torch.eq(x.reshape(-1, 1), mesh).sum(dim=0)

        return torch.bincount(x, minlength=minlength)

    def _cumsum(x, dim=0, dtype=None):
        if torch.are_deterministic_algorithms_enabled() and x.is_cuda and x.is_floating_point():
            warnings.warn("You are trying to use a metric in deterministic mode on GPU that uses `torch.cumsum`")
            device = x.device
            return x.cpu().cumsum(dim=dim, dtype=dtype).to(device)
        return torch.cumsum(x, dim=dim, dtype=dtype)

    def _flexible_bincount(x):
        # make sure elements in x start from 0
        x = x - x.min()
        unique_x = torch.unique(x)

        output = _bincount(x, minlength=torch.max(unique_x) + 1)
        # remove zeros from output tensor
        return output[unique_x]

    def _safe_xlogy(x, y):
        res = x * torch.log(y)
        res[x == 0] = 0.0
        return res

    def _safe_divide(num, denom, zero_division=0.0):
        num = num if num.is_floating_point() else num.float()
        denom = denom if denom.is_floating_point() else denom.float()
        if isinstance(zero_division, (float, int)) or zero_division == "warn":
            if zero_division == "warn" and torch.any(denom == 0):
                warnings.warn("Detected zero division in _safe_divide. Setting 0/0 to 0.0")
            zero_division = 0.0 if zero_division == "warn" else zero_division
            # MPS does not support non blocking
            zero_division_tensor = torch.tensor(zero_division, dtype=num.dtype).to(
                num.device, non_blocking=num.device.type != "mps"
            )
            return torch.where(denom != 0, num / denom, zero_division_tensor)
        return torch.true_divide(num, denom)

    def _adjust_weights_safe_divide(score, average, multilabel, tp, fp, fn, top_k=1):
        if average is None or average == "none":
            return score
        if average == "weighted":
            weights = tp + fn
        else:
            weights = torch.ones_like(score)
            if not multilabel:
                weights[tp + fp + fn == 0 if top_k == 1 else tp + fn == 0] = 0.0
        return _safe_divide(weights * score, weights.sum(-1, keepdim=True)).sum(-1)

    def _auc_compute_without_check(x, y, direction, axis=-1):
        with torch.no_grad():
            auc_score: Tensor = torch.trapz(y, x, dim=axis) * direction
        return auc_score

    def _auc_compute(x, y, reorder=False):
        with torch.no_grad():
            if reorder:
                x, x_idx = torch.sort(x, stable=True)
                y = y[x_idx]

            dx = x[1:] - x[:-1]
            if (dx < 0).any():
                if (dx <= 0).all():
                    direction = -1.0
                else:
                    raise ValueError(
                        "The `x` tensor is neither increasing or decreasing. Try setting the reorder argument to `True`."
                    )
            else:
                direction = 1.0
            return _auc_compute_without_check(x, y, direction)

    def interp(x, xp, fp):
        m = _safe_divide(fp[1:] - fp[:-1], xp[1:] - xp[:-1])
        b = fp[:-1] - (m * xp[:-1])

        indices = torch.sum(torch.ge(x[:, None], xp[None, :]), 1) - 1
        indices = torch.clamp(indices, 0, len(m) - 1)

        return m[indices] * x + b[indices]

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v) and k != "Tensor"})


def tm_utils_page(torch):
    u = tm_utils(torch)
    out = {}
    out["cat_list"] = _np(u.dim_zero_cat([torch.tensor(1.0), torch.tensor([2.0, 3.0]), torch.tensor(4.0)]))
    t = torch.tensor([5.0, 6.0])
    out["cat_same"] = u.dim_zero_cat(t) is t
    try:
        u.dim_zero_cat([])
        out["cat_empty"] = "no error"
    except ValueError as e:
        out["cat_empty"] = str(e)
    x = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 5])
    out["bincount"] = _np(u._bincount(x, minlength=7))
    out["bincount_unique"] = _np(u._bincount(torch.tensor([0, 1, 1, 2])))  # minlength = #unique = 3
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        out["bincount_det"] = _np(u._bincount(x, minlength=7))
    finally:
        torch.use_deterministic_algorithms(prev)
    out["flex"] = _np(u._flexible_bincount(torch.tensor([3, 3, 7, 5, 7, 7])))
    out["cumsum"] = _np(u._cumsum(torch.tensor([[1, 2], [3, 4]]), dim=0, dtype=torch.float64))
    out["onehot"] = _np(u.to_onehot(torch.tensor([[1, 2], [3, 0]]), 4))
    p = torch.tensor([[1.1, 2.0, 3.0], [2.0, 1.0, 0.5]])
    out["top1"] = _np(u.select_topk(p, topk=1))
    out["top2"] = _np(u.select_topk(p, topk=2))
    out["top2_half"] = _np(u.select_topk(p.half(), topk=2))
    out["safe_div"] = _np(u._safe_divide(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.0, 1.0, 2.0])))
    out["safe_div_int"] = _np(u._safe_divide(torch.tensor([1, 2]), torch.tensor([0, 4]), zero_division=1.0))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        u._safe_divide(torch.tensor([1.0]), torch.tensor([0.0]), zero_division="warn")
    out["warned"] = any("zero division" in str(i.message) for i in w)
    out["xlogy"] = _np(u._safe_xlogy(torch.tensor([0.0, 2.0]), torch.tensor([0.0, 3.0])))
    out["auc_inc"] = _np(u._auc_compute(torch.tensor([1.0, 2, 3, 4]), torch.tensor([1.0, 2, 3, 4])))
    out["auc_dec"] = _np(u._auc_compute(torch.tensor([4.0, 3, 1]), torch.tensor([2.0, 1, 1])))
    out["auc_reorder"] = _np(u._auc_compute(torch.tensor([3.0, 1, 4, 2]), torch.tensor([9.0, 1, 16, 4]), reorder=True))
    try:
        u._auc_compute(torch.tensor([1.0, 3, 2]), torch.tensor([1.0, 1, 1]))
        out["auc_err"] = "no error"
    except ValueError as e:
        out["auc_err"] = str(e)
    out["interp"] = _np(u.interp(torch.tensor([0.5, 1.5, 2.5, 3.5]), torch.tensor([1.0, 2, 3]), torch.tensor([1.0, 4, 9])))
    return out


def test_torchmetrics_utilities():
    out = _page(tm_utils_page)
    np.testing.assert_array_equal(out["cat_list"], [1.0, 2.0, 3.0, 4.0])
    assert out["cat_same"] is True
    assert out["cat_empty"] == "No samples to concatenate"
    np.testing.assert_array_equal(out["bincount"], [3, 2, 4, 0, 0, 1, 0])
    np.testing.assert_array_equal(out["bincount_det"], [3, 2, 4, 0, 0, 1, 0])
    np.testing.assert_array_equal(out["bincount_unique"], [1, 2, 1])
    np.testing.assert_array_equal(out["flex"], [2, 1, 3])  # counts of 3, 5, 7
    assert out["cumsum"].dtype == np.float64
    np.testing.assert_array_equal(out["cumsum"], [[1, 2], [4, 6]])
    want = np.zeros((2, 4, 2), dtype=np.int64)
    for n, c in ((0, 0), (0, 1), (1, 0), (1, 1)):
        want[n, [[1, 2], [3, 0]][n][c], c] = 1
    np.testing.assert_array_equal(out["onehot"], want)
    np.testing.assert_array_equal(out["top1"], [[0, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(out["top2"], [[0, 1, 1], [1, 1, 0]])
    np.testing.assert_array_equal(out["top2_half"], [[0, 1, 1], [1, 1, 0]])
    assert out["top2"].dtype == np.int32
    np.testing.assert_array_equal(out["safe_div"], [0.0, 2.0, 1.5])
    np.testing.assert_array_equal(out["safe_div_int"], [1.0, 0.5])
    assert out["safe_div_int"].dtype == np.float32
    assert out["warned"]
    np.testing.assert_allclose(out["xlogy"], [0.0, 2 * math.log(3)], rtol=1e-6)
    np.testing.assert_allclose(out["auc_inc"], 7.5)
    np.testing.assert_allclose(out["auc_dec"], 1.5 * 1 + 1 * 2)  # trapezoids over [1,3] and [3,4]
    np.testing.assert_allclose(out["auc_reorder"], (1 + 4) / 2 + (4 + 9) / 2 + (9 + 16) / 2)
    assert out["auc_err"].startswith("The `x` tensor is neither increasing or decreasing")
    # linear pieces of (1,1),(2,4),(3,9), extrapolated at both ends
    np.testing.assert_allclose(out["interp"], [-0.5, 2.5, 6.5, 11.5], rtol=1e-6)


def test_torchmetrics_utilities_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _page(tm_utils_page), tm_utils_page(torch)
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype, k
            np.testing.assert_allclose(a[k], b[k], rtol=1e-6, err_msg=k)
        else:
            assert a[k] == b[k], k


# ================================================================ torchmetrics classification
def tm_classification(torch):
    u = tm_utils(torch)
    F = torch.nn.functional
    _bincount, _safe_divide, _adjust_weights_safe_divide = u._bincount, u._safe_divide, u._adjust_weights_safe_divide
    select_topk = u.select_topk

    # ---- stat_scores.py
    def _binary_stat_scores_format(preds, target, threshold=0.5, ignore_index=None):
        if preds.is_floating_point():
            if not torch.all((preds >= 0) * (preds <= 1)):
                # preds is logits, convert with sigmoid
                preds = preds.sigmoid()
            preds = preds > threshold

        preds = preds.reshape(preds.shape[0], -1)
        target = target.reshape(target.shape[0], -1)

        if ignore_index is not None:
            idx = target == ignore_index
            target = target.clone()
            target[idx] = -1

        return preds, target

    def _binary_stat_scores_update(preds, target, multidim_average="global"):
        sum_dim = [0, 1] if multidim_average == "global" else 1
        tp = ((target == preds) & (target == 1)).sum(sum_dim).squeeze()
        fn = ((target != preds) & (target == 1)).sum(sum_dim).squeeze()
        fp = ((target != preds) & (target == 0)).sum(sum_dim).squeeze()
        tn = ((target == preds) & (target == 0)).sum(sum_dim).squeeze()
        return tp, fp, tn, fn

    def _binary_stat_scores_compute(tp, fp, tn, fn, multidim_average="global"):
        return torch.stack([tp, fp, tn, fn, tp + fn], dim=0 if multidim_average == "global" else 1).squeeze()

    def binary_stat_scores(preds, target, threshold=0.5, multidim_average="global", ignore_index=None):
        preds, target = _binary_stat_scores_format(preds, target, threshold, ignore_index)
        tp, fp, tn, fn = _binary_stat_scores_update(preds, target, multidim_average)
        return _binary_stat_scores_compute(tp, fp, tn, fn, multidim_average)

    def _multiclass_stat_scores_format(preds, target, top_k=1):
        # Apply argmax if we have one more dimension
        if preds.ndim == target.ndim + 1 and top_k == 1:
            preds = preds.argmax(dim=1)
        preds = preds.reshape(*preds.shape[:2], -1) if top_k != 1 else preds.reshape(preds.shape[0], -1)
        target = target.reshape(target.shape[0], -1)
        return preds, target

    def _multiclass_stat_scores_update(preds, target, num_classes, top_k=1, average="macro",
                                       multidim_average="global", ignore_index=None):
        if multidim_average == "samplewise" or top_k != 1:
            ignore_in = 0 <= ignore_index <= num_classes - 1 if ignore_index is not None else None
            if ignore_index is not None and not ignore_in:
                preds = preds.clone()
                target = target.clone()
                idx = target == ignore_index
                preds[idx] = num_classes
                target[idx] = num_classes

            if top_k > 1:
                preds_oh = torch.movedim(select_topk(preds, topk=top_k, dim=1), 1, -1)
            else:
                preds_oh = torch.nn.functional.one_hot(
                    preds, num_classes + 1 if ignore_index is not None and not ignore_in else num_classes
                )
            target_oh = torch.nn.functional.one_hot(
                target, num_classes + 1 if ignore_index is not None and not ignore_in else num_classes
            )
            if ignore_index is not None:
                if 0 <= ignore_index <= num_classes - 1:
                    target_oh[target == ignore_index, :] = -1
                else:
                    preds_oh = preds_oh[..., :-1]
                    target_oh = target_oh[..., :-1]
                    target_oh[target == num_classes, :] = -1
            sum_dim = [0, 1] if multidim_average == "global" else [1]
            tp = ((target_oh == preds_oh) & (target_oh == 1)).sum(sum_dim)
            fn = ((target_oh != preds_oh) & (target_oh == 1)).sum(sum_dim)
            fp = ((target_oh != preds_oh) & (target_oh == 0)).sum(sum_dim)
            tn = ((target_oh == preds_oh) & (target_oh == 0)).sum(sum_dim)
        elif average == "micro":
            preds = preds.flatten()
            target = target.flatten()
            if ignore_index is not None:
                idx = target != ignore_index
                preds = preds[idx]
                target = target[idx]
            tp = (preds == target).sum()
            fp = (preds != target).sum()
            fn = (preds != target).sum()
            tn = num_classes * preds.numel() - (fp + fn + tp)
        else:
            preds = preds.flatten()
            target = target.flatten()
            if ignore_index is not None:
                idx = target != ignore_index
                preds = preds[idx]
                target = target[idx]
            unique_mapping = target.to(torch.long) * num_classes + preds.to(torch.long)
            bins = _bincount(unique_mapping, minlength=num_classes**2)
            confmat = bins.reshape(num_classes, num_classes)
            tp = confmat.diag()
            fp = confmat.sum(0) - tp
            fn = confmat.sum(1) - tp
            tn = confmat.sum() - (fp + fn + tp)
        return tp, fp, tn, fn

    def _multiclass_stat_scores_compute(tp, fp, tn, fn, average="macro", multidim_average="global"):
        res = torch.stack([tp, fp, tn, fn, tp + fn], dim=-1)
        sum_dim = 0 if multidim_average == "global" else 1
        if average == "micro":
            return res.sum(sum_dim) if res.ndim > 1 else res
        if average == "macro":
            return res.float().mean(sum_dim)
        elif average == "weighted":
            weight = tp + fn
            if multidim_average == "global":
                return (res * (weight / weight.sum()).reshape(*weight.shape, 1)).sum(sum_dim)
            else:
                return (res * (weight / weight.sum(-1, keepdim=True)).reshape(*weight.shape, 1)).sum(sum_dim)
        elif average is None or average == "none":
            return res

    def multiclass_stat_scores(preds, target, num_classes, average="macro", top_k=1, multidim_average="global",
                               ignore_index=None):
        preds, target = _multiclass_stat_scores_format(preds, target, top_k)
        tp, fp, tn, fn = _multiclass_stat_scores_update(
            preds, target, num_classes, top_k, average, multidim_average, ignore_index
        )
        return _multiclass_stat_scores_compute(tp, fp, tn, fn, average, multidim_average)

    # ---- confusion_matrix.py
    def _multiclass_confusion_matrix_update(preds, target, num_classes):
        unique_mapping = target.to(torch.long) * num_classes + preds.to(torch.long)
        bins = _bincount(unique_mapping, minlength=num_classes**2)
        return bins.reshape(num_classes, num_classes)

    def _confusion_matrix_reduce(confmat, normalize=None):
        if normalize is not None and normalize != "none":
            confmat = confmat.float() if not confmat.is_floating_point() else confmat
            if normalize == "true":
                confmat = confmat / confmat.sum(axis=-1, keepdim=True)
            elif normalize == "pred":
                confmat = confmat / confmat.sum(axis=-2, keepdim=True)
            elif normalize == "all":
                confmat = confmat / confmat.sum(axis=[-2, -1], keepdim=True)

            nan_elements = confmat[torch.isnan(confmat)].nelement()
            if nan_elements:
                confmat[torch.isnan(confmat)] = 0
                warnings.warn(f"{nan_elements} NaN values found in confusion matrix have been replaced with zeros.")
        return confmat

    def multiclass_confusion_matrix(preds, target, num_classes, normalize=None, ignore_index=None):
        if preds.ndim == target.ndim + 1:
            preds = preds.argmax(dim=1)
        preds = preds.flatten()
        target = target.flatten()
        if ignore_index is not None:
            idx = target != ignore_index
            preds = preds[idx]
            target = target[idx]
        confmat = _multiclass_confusion_matrix_update(preds, target, num_classes)
        return _confusion_matrix_reduce(confmat, normalize)

    # ---- accuracy.py, precision_recall.py, f_beta.py
    def _accuracy_reduce(tp, fp, tn, fn, average, multidim_average="global", multilabel=False, top_k=1):
        if average == "binary":
            return _safe_divide(tp + tn, tp + tn + fp + fn)
        if average == "micro":
            tp = tp.sum(dim=0 if multidim_average == "global" else 1)
            fn = fn.sum(dim=0 if multidim_average == "global" else 1)
            if multilabel:
                fp = fp.sum(dim=0 if multidim_average == "global" else 1)
                tn = tn.sum(dim=0 if multidim_average == "global" else 1)
                return _safe_divide(tp + tn, tp + tn + fp + fn)
            return _safe_divide(tp, tp + fn)

        score = _safe_divide(tp + tn, tp + tn + fp + fn) if multilabel else _safe_divide(tp, tp + fn)
        return _adjust_weights_safe_divide(score, average, multilabel, tp, fp, fn, top_k)

    def _precision_recall_reduce(stat, tp, fp, tn, fn, average, multidim_average="global", multilabel=False,
                                 top_k=1):
        different_stat = fp if stat == "precision" else fn  # this is what differs between the two scores
        if average == "binary":
            return _safe_divide(tp, tp + different_stat)
        if average == "micro":
            tp = tp.sum(dim=0 if multidim_average == "global" else 1)
            fn = fn.sum(dim=0 if multidim_average == "global" else 1)
            different_stat = different_stat.sum(dim=0 if multidim_average == "global" else 1)
            return _safe_divide(tp, tp + different_stat)

        score = _safe_divide(tp, tp + different_stat)
        return _adjust_weights_safe_divide(score, average, multilabel, tp, fp, fn, top_k=top_k)

    def _fbeta_reduce(tp, fp, tn, fn, beta, average, multidim_average="global", multilabel=False):
        beta2 = beta**2
        if average == "binary":
            return _safe_divide((1 + beta2) * tp, (1 + beta2) * tp + beta2 * fn + fp)
        if average == "micro":
            sum_dim = 0 if multidim_average == "global" else 1
            tp = tp.sum(dim=sum_dim)
            fn = fn.sum(dim=sum_dim)
            fp = fp.sum(dim=sum_dim)
            return _safe_divide((1 + beta2) * tp, (1 + beta2) * tp + beta2 * fn + fp)

        fbeta_score = _safe_divide((1 + beta2) * tp, (1 + beta2) * tp + beta2 * fn + fp)
        return _adjust_weights_safe_divide(fbeta_score, average, multilabel, tp, fp, fn)

    def binary_accuracy(preds, target, threshold=0.5, multidim_average="global", ignore_index=None):
        preds, target = _binary_stat_scores_format(preds, target, threshold, ignore_index)
        tp, fp, tn, fn = _binary_stat_scores_update(preds, target, multidim_average)
        return _accuracy_reduce(tp, fp, tn, fn, average="binary", multidim_average=multidim_average)

    def _multiclass_stats(preds, target, num_classes, average, top_k, multidim_average, ignore_index):
        preds, target = _multiclass_stat_scores_format(preds, target, top_k)
        return _multiclass_stat_scores_update(preds, target, num_classes, top_k, average, multidim_average,
                                              ignore_index)

    def multiclass_accuracy(preds, target, num_classes, average="macro", top_k=1, multidim_average="global",
                            ignore_index=None):
        tp, fp, tn, fn = _multiclass_stats(preds, target, num_classes, average, top_k, multidim_average, ignore_index)
        return _accuracy_reduce(tp, fp, tn, fn, average=average, multidim_average=multidim_average, top_k=top_k)

    def multiclass_precision(preds, target, num_classes, average="macro", top_k=1, multidim_average="global",
                             ignore_index=None):
        tp, fp, tn, fn = _multiclass_stats(preds, target, num_classes, average, top_k, multidim_average, ignore_index)
        return _precision_recall_reduce("precision", tp, fp, tn, fn, average=average,
                                        multidim_average=multidim_average, top_k=top_k)

    def multiclass_recall(preds, target, num_classes, average="macro", top_k=1, multidim_average="global",
                          ignore_index=None):
        tp, fp, tn, fn = _multiclass_stats(preds, target, num_classes, average, top_k, multidim_average, ignore_index)
        return _precision_recall_reduce("recall", tp, fp, tn, fn, average=average,
                                        multidim_average=multidim_average, top_k=top_k)

    def multiclass_fbeta_score(preds, target, beta, num_classes, average="macro", top_k=1,
                               multidim_average="global", ignore_index=None):
        tp, fp, tn, fn = _multiclass_stats(preds, target, num_classes, average, top_k, multidim_average, ignore_index)
        return _fbeta_reduce(tp, fp, tn, fn, beta, average=average, multidim_average=multidim_average)

    def multiclass_f1_score(preds, target, num_classes, average="macro", top_k=1, multidim_average="global",
                            ignore_index=None):
        return multiclass_fbeta_score(preds, target, 1.0, num_classes, average, top_k, multidim_average,
                                      ignore_index)

    # ---- precision_recall_curve.py
    def _binary_clf_curve(preds, target, sample_weights=None, pos_label=1):
        if sample_weights is not None and not isinstance(sample_weights, torch.Tensor):
            sample_weights = torch.tensor(sample_weights, device=preds.device, dtype=torch.float)

        # remove class dimension if necessary
        if preds.ndim > target.ndim:
            preds = preds[:, 0]
        desc_score_indices = torch.argsort(preds, descending=True)

        preds = preds[desc_score_indices]
        target = target[desc_score_indices]

        if sample_weights is not None:
            weight = sample_weights[desc_score_indices]
        else:
            weight = 1.0

        # pred typically has many tied values. Here we extract
        # the indices associated with the distinct values. We also
        # concatenate a value for the end of the curve.
        distinct_value_indices = torch.where(preds[1:] - preds[:-1])[0]
        threshold_idxs = F.pad(distinct_value_indices, [0, 1], value=target.size(0) - 1)
        target = (target == pos_label).to(torch.long)
        tps = torch.cumsum(target * weight, dim=0)[threshold_idxs]

        if sample_weights is not None:
            # express fps as a cumsum to ensure fps is increasing even in
            # the presence of floating point errors
            fps = torch.cumsum((1 - target) * weight, dim=0)[threshold_idxs]
        else:
            fps = 1 + threshold_idxs - tps

        return fps, tps, preds[threshold_idxs]

    def _binary_precision_recall_curve_format(preds, target, thresholds=100, ignore_index=None):
        preds = preds.flatten()
        target = target.flatten()
        if ignore_index is not None:
            idx = target != ignore_index
            preds = preds[idx]
            target = target[idx]

        if not torch.all((0 <= preds) * (preds <= 1)):
            preds = preds.sigmoid()

        if isinstance(thresholds, int):
            thresholds = torch.linspace(0, 1, thresholds + 1, device=preds.device)[1:]
        if isinstance(thresholds, list):
            thresholds = torch.tensor(thresholds, device=preds.device)

        return preds, target, thresholds

    def _binary_precision_recall_curve_update(preds, target, thresholds):
        if thresholds is None:
            return preds, target
        len_t = len(thresholds)

        preds_t = (preds.unsqueeze(-1) > thresholds.unsqueeze(0)).long()  # num_samples x num_thresholds
        unique_mapping = preds_t + 2 * target.unsqueeze(-1) + 4 * torch.arange(len_t)
        bins = _bincount(unique_mapping.flatten(), minlength=4 * len_t)
        return bins.reshape(len_t, 2, 2)

    def _binary_precision_recall_curve_compute(state, thresholds, pos_label=1):
        if isinstance(state, torch.Tensor):
            tps = state[:, 1, 1]
            fps = state[:, 0, 1]
            fns = state[:, 1, 0]
            precision = _safe_divide(tps, tps + fps)
            recall = _safe_divide(tps, tps + fns)
            precision = torch.cat([precision, torch.ones(1, dtype=precision.dtype, device=precision.device)])
            recall = torch.cat([recall, torch.zeros(1, dtype=recall.dtype, device=recall.device)])
            return precision, recall, thresholds
        else:
            fps, tps, thresholds = _binary_clf_curve(state[0], state[1], pos_label=pos_label)
            precision = tps / (tps + fps)
            recall = tps / tps[-1]

            # stop when full recall attained and reverse the outputs so recall is decreasing
            last_ind = torch.where(tps == tps[-1])[0][0]
            sl = slice(0, last_ind.item() + 1)

            # need to call reversed explicitly, since including that to slice would
            # introduce negative strides that are not yet supported in pytorch
            precision = torch.cat([reversed(precision[sl]),
                                   torch.ones(1, dtype=precision.dtype, device=precision.device)])
            recall = torch.cat([reversed(recall[sl]), torch.zeros(1, dtype=recall.dtype, device=recall.device)])
            thresholds = reversed(thresholds[sl]).detach().clone()

        return precision, recall, thresholds

    def binary_precision_recall_curve(preds, target, thresholds=None, ignore_index=None):
        preds, target, thresholds = _binary_precision_recall_curve_format(preds, target, thresholds, ignore_index)
        state = _binary_precision_recall_curve_update(preds, target, thresholds)
        return _binary_precision_recall_curve_compute(state, thresholds)

    # ---- roc.py
    def _binary_roc_compute(state, thresholds, pos_label=1):
        if isinstance(state, torch.Tensor) and thresholds is not None:
            tps = state[:, 1, 1]
            fps = state[:, 0, 1]
            fns = state[:, 1, 0]
            tns = state[:, 0, 0]
            tpr = _safe_divide(tps, tps + fns).flip(0)
            fpr = _safe_divide(fps, fps + tns).flip(0)
            thresholds = thresholds.flip(0)
        else:
            fps, tps, thresholds = _binary_clf_curve(preds=state[0], target=state[1], pos_label=pos_label)
            # Add an extra threshold position to make sure that the curve starts at (0, 0)
            tps = torch.cat([torch.zeros(1, dtype=tps.dtype, device=tps.device), tps])
            fps = torch.cat([torch.zeros(1, dtype=fps.dtype, device=fps.device), fps])
            thresholds = torch.cat([torch.ones(1, dtype=thresholds.dtype, device=thresholds.device), thresholds])

            if fps[-1] <= 0:
                warnings.warn(
                    "No negative samples in targets, false positive value should be meaningless."
                    " Returning zero tensor in false positive score",
                    UserWarning,
                )
                fpr = torch.zeros_like(thresholds)
            else:
                fpr = fps / fps[-1]

            if tps[-1] <= 0:
                warnings.warn(
                    "No positive samples in targets, true positive value should be meaningless."
                    " Returning zero tensor in true positive score",
                    UserWarning,
                )
                tpr = torch.zeros_like(thresholds)
            else:
                tpr = tps / tps[-1]

        return fpr, tpr, thresholds

    def binary_roc(preds, target, thresholds=None, ignore_index=None):
        preds, target, thresholds = _binary_precision_recall_curve_format(preds, target, thresholds, ignore_index)
        state = _binary_precision_recall_curve_update(preds, target, thresholds)
        return _binary_roc_compute(state, thresholds)

    # ---- auroc.py
    def _binary_auroc_compute(state, thresholds, max_fpr=None, pos_label=1):
        fpr, tpr, _ = _binary_roc_compute(state, thresholds, pos_label)
        if max_fpr is None or max_fpr == 1 or fpr.sum() == 0 or tpr.sum() == 0:
            return u._auc_compute_without_check(fpr, tpr, 1.0)

        _device = fpr.device if isinstance(fpr, torch.Tensor) else fpr[0].device
        max_area = torch.tensor(max_fpr, device=_device)
        # Add a single point at max_fpr and interpolate its tpr value
        stop = torch.bucketize(max_area, fpr, out_int32=True, right=True)
        weight = (max_area - fpr[stop - 1]) / (fpr[stop] - fpr[stop - 1])
        interp_tpr = torch.lerp(tpr[stop - 1], tpr[stop], weight)
        tpr = torch.cat([tpr[:stop], interp_tpr.view(1)])
        fpr = torch.cat([fpr[:stop], max_area.view(1)])

        # Compute partial AUC
        partial_auc = u._auc_compute_without_check(fpr, tpr, 1.0)

        # McClish correction: standardize result to be 0.5 if non-discriminant and 1 if maximal
        min_area = 0.5 * max_area**2
        return 0.5 * (1 + (partial_auc - min_area) / (max_area - min_area))

    def binary_auroc(preds, target, max_fpr=None, thresholds=None, ignore_index=None):
        preds, target, thresholds = _binary_precision_recall_curve_format(preds, target, thresholds, ignore_index)
        state = _binary_precision_recall_curve_update(preds, target, thresholds)
        return _binary_auroc_compute(state, thresholds, max_fpr)

    # ---- average_precision.py
    def _binary_average_precision_compute(state, thresholds):
        precision, recall, _ = _binary_precision_recall_curve_compute(state, thresholds)
        return -torch.sum((recall[1:] - recall[:-1]) * precision[:-1])

    def binary_average_precision(preds, target, thresholds=None, ignore_index=None):
        preds, target, thresholds = _binary_precision_recall_curve_format(preds, target, thresholds, ignore_index)
        state = _binary_precision_recall_curve_update(preds, target, thresholds)
        return _binary_average_precision_compute(state, thresholds)

    # ---- calibration_error.py
    def _binning_bucketize(confidences, accuracies, bin_boundaries):
        accuracies = accuracies.to(dtype=confidences.dtype)
        acc_bin = torch.zeros(len(bin_boundaries), device=confidences.device, dtype=confidences.dtype)
        conf_bin = torch.zeros(len(bin_boundaries), device=confidences.device, dtype=confidences.dtype)
        count_bin = torch.zeros(len(bin_boundaries), device=confidences.device, dtype=confidences.dtype)

        indices = torch.bucketize(confidences, bin_boundaries, right=True) - 1

        count_bin.scatter_add_(dim=0, index=indices, src=torch.ones_like(confidences))

        conf_bin.scatter_add_(dim=0, index=indices, src=confidences)
        conf_bin = torch.nan_to_num(conf_bin / count_bin)

        acc_bin.scatter_add_(dim=0, index=indices, src=accuracies)
        acc_bin = torch.nan_to_num(acc_bin / count_bin)

        prop_bin = count_bin / count_bin.sum()
        return acc_bin, conf_bin, prop_bin

    def _ce_compute(confidences, accuracies, bin_boundaries, norm="l1", debias=False):
        if isinstance(bin_boundaries, int):
            bin_boundaries = torch.linspace(0, 1, bin_boundaries + 1, dtype=confidences.dtype,
                                            device=confidences.device)

        if norm not in {"l1", "l2", "max"}:
            raise ValueError(f"Argument `norm` is expected to be one of 'l1', 'l2', 'max' but got {norm}")

        with torch.no_grad():
            acc_bin, conf_bin, prop_bin = _binning_bucketize(confidences, accuracies, bin_boundaries)

        if norm == "l1":
            return torch.sum(torch.abs(acc_bin - conf_bin) * prop_bin)
        if norm == "max":
            ce = torch.max(torch.abs(acc_bin - conf_bin))
        if norm == "l2":
            ce = torch.sum(torch.pow(acc_bin - conf_bin, 2) * prop_bin)
            # NOTE: debiasing is disabled in the wrapper functions. This implementation differs from that in sklearn.
            if debias:
                # the order here (acc_bin - 1 ) vs (1 - acc_bin) is flipped from
                # the equation in Verified Uncertainty Prediction (Kumar et al 2019)/
                debias_bins = (acc_bin * (acc_bin - 1) * prop_bin) / (prop_bin * accuracies.size()[0] - 1)
                ce += torch.sum(torch.nan_to_num(debias_bins))  # replace nans with zeros if nothing appeared in a bin
            return torch.sqrt(ce) if ce > 0 else torch.tensor(0)
        return ce

    def binary_calibration_error(preds, target, n_bins=15, norm="l1"):
        preds, target = preds.flatten(), target.flatten()
        if not torch.all((preds >= 0) * (preds <= 1)):
            preds = preds.sigmoid()
        confidences, accuracies = preds, target
        return _ce_compute(confidences, accuracies, n_bins, norm)

    def multiclass_calibration_error(preds, target, num_classes, n_bins=15, norm="l1"):
        preds = preds.flatten(0, -2) if preds.ndim > 2 else preds
        if not torch.all((preds >= 0) * (preds <= 1)):
            preds = preds.softmax(1)
        confidences, predictions = preds.max(dim=1)
        accuracies = predictions.eq(target.flatten())
        return _ce_compute(confidences.float(), accuracies.float(), n_bins, norm)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


def _cls_data():
    rng = np.random.default_rng(17)
    C, N = 4, 24
    logits = rng.standard_normal((N, C)).astype(np.float32)
    target = rng.integers(0, C, N)
    target[:3] = [0, 1, 2]  # class 3 may be rare: keep it present once
    target[3] = 3
    scores = np.round(rng.uniform(size=30), 1).astype(np.float32)  # ties on purpose
    btarget = (rng.uniform(size=30) < 0.3 + 0.5 * scores).astype(np.int64)
    return logits, target, scores, btarget


def tm_classification_page(torch):
    m = tm_classification(torch)
    logits, target, scores, btarget = _cls_data()
    C = logits.shape[1]
    lg, tg = torch.tensor(logits), torch.tensor(target)
    out = {}
    # binary stat scores: label tensor, probabilities, logits (sigmoid applied), samplewise, ignore_index
    out["bss_int"] = _np(m.binary_stat_scores(torch.tensor([0, 0, 1, 1, 0, 1]), torch.tensor([0, 1, 0, 1, 0, 1])))
    p3 = torch.tensor([[[0.59, 0.91], [0.91, 0.99], [0.63, 0.04]], [[0.38, 0.04], [0.86, 0.780], [0.45, 0.37]]])
    t3 = torch.tensor([[[0, 1], [1, 0], [0, 1]], [[1, 1], [0, 0], [1, 0]]])
    out["bss_samplewise"] = _np(m.binary_stat_scores(p3, t3, multidim_average="samplewise"))
    bs, bt = torch.tensor(scores), torch.tensor(btarget)
    out["bss_logits"] = _np(m.binary_stat_scores(bs * 8 - 4, bt))
    bt_ign = bt.clone()
    bt_ign[:5] = -1
    out["bss_ignore"] = _np(m.binary_stat_scores(bs, bt_ign, ignore_index=-1))
    out["bacc"] = _np(m.binary_accuracy(bs, bt, threshold=0.4))
    # multiclass
    for avg in ("micro", "macro", "weighted", "none"):
        out[f"mss_{avg}"] = _np(m.multiclass_stat_scores(lg, tg, C, average=avg))
        out[f"acc_{avg}"] = _np(m.multiclass_accuracy(lg, tg, C, average=avg))
        out[f"prec_{avg}"] = _np(m.multiclass_precision(lg, tg, C, average=avg))
        out[f"rec_{avg}"] = _np(m.multiclass_recall(lg, tg, C, average=avg))
        out[f"f1_{avg}"] = _np(m.multiclass_f1_score(lg, tg, C, average=avg))
    out["f2_macro"] = _np(m.multiclass_fbeta_score(lg, tg, 2.0, C, average="macro"))
    out["acc_macro_ign"] = _np(m.multiclass_accuracy(lg, tg, C, average="macro", ignore_index=1))
    out["prec_none_ign"] = _np(m.multiclass_precision(lg, tg, C, average="none", ignore_index=1))
    out["acc_top2"] = _np(m.multiclass_accuracy(lg, tg, C, average="micro", top_k=2))
    out["rec_top2_macro"] = _np(m.multiclass_recall(lg, tg, C, average="macro", top_k=2))
    # (upstream's top_k > 1 path masks ``preds[target == ignore_index]`` with an (N, 1) mask on (N, C, 1)
    # scores, which PyTorch refuses too for an ignore_index outside the classes: use one inside)
    out["acc_top2_ign_in"] = _np(m.multiclass_accuracy(lg, tg, C, average="none", top_k=2, ignore_index=2))
    # samplewise on (N, extra) labels
    pl = lg.argmax(1).reshape(4, 6)
    tl = tg.reshape(4, 6)
    out["mss_samplewise"] = _np(m.multiclass_stat_scores(pl, tl, C, average="none", multidim_average="samplewise"))
    out["acc_samplewise"] = _np(m.multiclass_accuracy(pl, tl, C, average="micro", multidim_average="samplewise"))
    out["confmat"] = _np(m.multiclass_confusion_matrix(lg, tg, C))
    out["confmat_true"] = _np(m.multiclass_confusion_matrix(lg, tg, C, normalize="true"))
    out["confmat_all_ign"] = _np(m.multiclass_confusion_matrix(lg, tg, C, normalize="all", ignore_index=0))
    # curves
    fps, tps, thr = m._binary_clf_curve(bs, bt)
    out["clf_fps"], out["clf_tps"], out["clf_thr"] = _np(fps), _np(tps), _np(thr)
    w = np.linspace(0.5, 2.0, len(scores)).astype(np.float32)
    fpsw, tpsw, _ = m._binary_clf_curve(bs, bt, sample_weights=w.tolist())
    out["clf_fps_w"], out["clf_tps_w"] = _np(fpsw), _np(tpsw)
    pr = m.binary_precision_recall_curve(bs, bt)
    out["pr_p"], out["pr_r"], out["pr_t"] = (_np(v) for v in pr)
    prb = m.binary_precision_recall_curve(bs, bt, thresholds=5)
    out["prb_p"], out["prb_r"], out["prb_t"] = (_np(v) for v in prb)
    roc = m.binary_roc(bs, bt)
    out["roc_fpr"], out["roc_tpr"], out["roc_thr"] = (_np(v) for v in roc)
    rocb = m.binary_roc(bs, bt, thresholds=[0.2, 0.5, 0.8])
    out["rocb_fpr"], out["rocb_tpr"], out["rocb_thr"] = (_np(v) for v in rocb)
    out["auroc"] = _np(m.binary_auroc(bs, bt))
    out["auroc_logits"] = _np(m.binary_auroc(bs * 6 - 3, bt))
    out["auroc_pfpr"] = _np(m.binary_auroc(bs, bt, max_fpr=0.3))
    out["ap"] = _np(m.binary_average_precision(bs, bt))
    with warnings.catch_warnings(record=True) as wr:
        warnings.simplefilter("always")
        fpr0, _, _ = m.binary_roc(bs[:4], torch.ones(4, dtype=torch.long))
    out["roc_no_neg"] = _np(fpr0)
    out["roc_no_neg_warned"] = any("No negative samples" in str(i.message) for i in wr)
    # calibration
    for norm in ("l1", "l2", "max"):
        out[f"bce_{norm}"] = _np(m.binary_calibration_error(bs, bt, n_bins=5, norm=norm))
        out[f"mce_{norm}"] = _np(m.multiclass_calibration_error(lg, tg, C, n_bins=4, norm=norm))
    return out


def _stats_np(pred, tgt, C):
    cm = np.zeros((C, C), np.int64)
    np.add.at(cm, (tgt, pred), 1)
    tp = np.diag(cm)
    fp = cm.sum(0) - tp
    fn = cm.sum(1) - tp
    tn = cm.sum() - tp - fp - fn
    return cm, tp, fp, tn, fn


def _div0(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return np.where(b != 0, a / np.where(b == 0, 1, b), 0.0)


def _clf_curve_np(scores, tgt, w=None):
    w = np.ones_like(scores, dtype=np.float64) if w is None else w
    thr = np.unique(scores)[::-1]
    tps = np.array([(w * tgt)[scores >= t].sum() for t in thr])
    fps = np.array([(w * (1 - tgt))[scores >= t].sum() for t in thr])
    return fps, tps, thr


def test_torchmetrics_stat_scores_and_averages():
    out = _page(tm_classification_page)
    logits, target, scores, btarget = _cls_data()
    C = logits.shape[1]
    np.testing.assert_array_equal(out["bss_int"], [2, 1, 2, 1, 3])  # the docstring's example
    np.testing.assert_array_equal(out["bss_samplewise"], [[2, 3, 0, 1, 3], [0, 2, 1, 3, 3]])

    def bstats(pred, tgt):
        tp = int(((pred == 1) & (tgt == 1)).sum())
        fp = int(((pred == 1) & (tgt == 0)).sum())
        tn = int(((pred == 0) & (tgt == 0)).sum())
        fn = int(((pred == 0) & (tgt == 1)).sum())
        return [tp, fp, tn, fn, tp + fn]

    sig = 1 / (1 + np.exp(-(scores.astype(np.float64) * 8 - 4)))
    np.testing.assert_array_equal(out["bss_logits"], bstats((sig > 0.5).astype(int), btarget))
    np.testing.assert_array_equal(out["bss_ignore"], bstats((scores[5:] > 0.5).astype(int), btarget[5:]))
    np.testing.assert_allclose(out["bacc"], np.mean((scores > 0.4) == btarget), rtol=1e-6)

    pred = logits.argmax(1)
    cm, tp, fp, tn, fn = _stats_np(pred, target, C)
    np.testing.assert_array_equal(out["confmat"], cm)
    np.testing.assert_allclose(out["confmat_true"], cm / cm.sum(1, keepdims=True), rtol=1e-6)
    keep = target != 0
    cm0 = _stats_np(pred[keep], target[keep], C)[0]
    np.testing.assert_allclose(out["confmat_all_ign"], cm0 / cm0.sum(), rtol=1e-6)
    stats = np.stack([tp, fp, tn, fn, tp + fn], -1)
    np.testing.assert_array_equal(out["mss_none"], stats)
    np.testing.assert_allclose(out["mss_macro"], stats.mean(0), rtol=1e-6)
    sup = tp + fn
    np.testing.assert_allclose(out["mss_weighted"], (stats * (sup / sup.sum())[:, None]).sum(0), rtol=1e-6)
    ncorrect = int((pred == target).sum())
    N = len(target)
    np.testing.assert_array_equal(out["mss_micro"], [ncorrect, N - ncorrect, C * N - 2 * N + ncorrect,
                                                     N - ncorrect, N])
    prec, rec = _div0(tp, tp + fp), _div0(tp, tp + fn)
    f1, f2 = _div0(2 * tp, 2 * tp + fn + fp), _div0(5 * tp, 5 * tp + 4 * fn + fp)
    present = (tp + fp + fn) > 0
    for name, per in (("acc", rec), ("prec", prec), ("rec", rec), ("f1", f1)):
        np.testing.assert_allclose(out[f"{name}_none"], per, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(out[f"{name}_macro"], per[present].mean(), rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(out[f"{name}_weighted"], (per * sup).sum() / sup.sum(), rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(out[f"{name}_micro"], ncorrect / N, rtol=1e-6, err_msg=name)
    np.testing.assert_allclose(out["f2_macro"], f2[present].mean(), rtol=1e-6)
    # ignore_index=1 drops those samples before the confusion matrix
    keep = target != 1
    _, tp1, fp1, tn1, fn1 = _stats_np(pred[keep], target[keep], C)
    pres1 = (tp1 + fp1 + fn1) > 0
    np.testing.assert_allclose(out["acc_macro_ign"], _div0(tp1, tp1 + fn1)[pres1].mean(), rtol=1e-6)
    np.testing.assert_allclose(out["prec_none_ign"], _div0(tp1, tp1 + fp1), rtol=1e-6)
    # top-2: a sample counts as a hit for its class when the class is among its two largest logits
    top2 = np.argsort(-logits, 1)[:, :2]
    hit = np.array([target[i] in top2[i] for i in range(N)])
    np.testing.assert_allclose(out["acc_top2"], hit.mean(), rtol=1e-6)
    np.testing.assert_allclose(out["rec_top2_macro"], np.mean([hit[target == c].mean() for c in range(C)]), rtol=1e-6)
    # ignore_index=2 inside the classes: class 2's row of one-hot targets becomes -1 (no tp, no fn)
    want = [hit[target == c].mean() if c != 2 else 0.0 for c in range(C)]
    np.testing.assert_allclose(out["acc_top2_ign_in"], want, rtol=1e-6)
    # samplewise: 4 samples of 6 positions
    pl, tl = pred.reshape(4, 6), target.reshape(4, 6)
    for n in range(4):
        _, tpn, fpn, tnn, fnn = _stats_np(pl[n], tl[n], C)
        np.testing.assert_array_equal(out["mss_samplewise"][n], np.stack([tpn, fpn, tnn, fnn, tpn + fnn], -1))
    np.testing.assert_allclose(out["acc_samplewise"], (pl == tl).mean(1), rtol=1e-6)


def test_torchmetrics_curves_auroc_ap_calibration():
    out = _page(tm_classification_page)
    logits, target, scores, btarget = _cls_data()
    s64 = scores.astype(np.float64)
    fps, tps, thr = _clf_curve_np(s64, btarget)
    np.testing.assert_array_equal(out["clf_fps"], fps)
    np.testing.assert_array_equal(out["clf_tps"], tps)
    np.testing.assert_allclose(out["clf_thr"], thr, rtol=1e-6)
    w = np.linspace(0.5, 2.0, len(scores)).astype(np.float32).astype(np.float64)
    fpsw, tpsw, _ = _clf_curve_np(s64, btarget, w)
    np.testing.assert_allclose(out["clf_fps_w"], fpsw, rtol=1e-5)
    np.testing.assert_allclose(out["clf_tps_w"], tpsw, rtol=1e-5)
    # precision-recall curve: stop at full recall, reversed, with the (1, 0) end point
    P = tps[-1]
    last = int(np.argmax(tps == P))
    np.testing.assert_allclose(out["pr_p"], np.r_[(tps / (tps + fps))[: last + 1][::-1], 1.0], rtol=1e-6)
    np.testing.assert_allclose(out["pr_r"], np.r_[(tps / P)[: last + 1][::-1], 0.0], rtol=1e-6)
    np.testing.assert_allclose(out["pr_t"], thr[: last + 1][::-1], rtol=1e-6)
    # binned: thresholds 0.2 .. 1.0, "preds > t"
    ts = np.linspace(0, 1, 6)[1:]
    tpb = np.array([((s64 > t) & (btarget == 1)).sum() for t in np.float32(ts)])
    fpb = np.array([((s64 > t) & (btarget == 0)).sum() for t in np.float32(ts)])
    fnb = np.array([((s64 <= t) & (btarget == 1)).sum() for t in np.float32(ts)])
    np.testing.assert_allclose(out["prb_p"], np.r_[_div0(tpb, tpb + fpb), 1.0], rtol=1e-6)
    np.testing.assert_allclose(out["prb_r"], np.r_[_div0(tpb, tpb + fnb), 0.0], rtol=1e-6)
    np.testing.assert_allclose(out["prb_t"], ts, rtol=1e-6)
    # ROC
    Nn = (btarget == 0).sum()
    np.testing.assert_allclose(out["roc_fpr"], np.r_[0, fps / Nn], rtol=1e-6)
    np.testing.assert_allclose(out["roc_tpr"], np.r_[0, tps / P], rtol=1e-6)
    np.testing.assert_allclose(out["roc_thr"], np.r_[1.0, thr], rtol=1e-6)
    tb = np.float32([0.2, 0.5, 0.8])
    np.testing.assert_allclose(out["rocb_tpr"], [((s64 > t) & (btarget == 1)).sum() / P for t in tb][::-1], rtol=1e-6)
    np.testing.assert_allclose(out["rocb_fpr"], [((s64 > t) & (btarget == 0)).sum() / Nn for t in tb][::-1], rtol=1e-6)
    # AUROC == Mann-Whitney U / (P * N): P(score_pos > score_neg) + 0.5 P(tie)
    pos, neg = s64[btarget == 1], s64[btarget == 0]
    u_stat = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    np.testing.assert_allclose(out["auroc"], u_stat / (len(pos) * len(neg)), rtol=1e-6)
    sig = 1 / (1 + np.exp(-(s64 * 6 - 3)))  # logits: sigmoid is monotone, same ranking
    np.testing.assert_allclose(out["auroc_logits"], u_stat / (len(pos) * len(neg)), rtol=1e-5)
    assert sig.min() < 0.5 < sig.max()
    # partial AUC up to fpr 0.3 with McClish's standardisation
    fx, ty = np.r_[0, fps / Nn], np.r_[0, tps / P]
    cut = fx <= 0.3
    xs = np.r_[fx[cut], 0.3]
    ys = np.r_[ty[cut], np.interp(0.3, fx, ty)]
    pauc = np.sum((xs[1:] - xs[:-1]) * (ys[1:] + ys[:-1]) / 2)
    np.testing.assert_allclose(out["auroc_pfpr"], 0.5 * (1 + (pauc - 0.045) / (0.3 - 0.045)), rtol=1e-5)
    # average precision = sum_n (R_n - R_{n-1}) P_n over the decreasing thresholds
    prec_t, rec_t = tps / (tps + fps), tps / P
    np.testing.assert_allclose(out["ap"], np.sum(np.diff(np.r_[0, rec_t]) * prec_t), rtol=1e-6)
    np.testing.assert_array_equal(out["roc_no_neg"], np.zeros_like(out["roc_no_neg"]))
    assert out["roc_no_neg_warned"]

    # calibration error, bins [b_i, b_{i+1}) from linspace(0, 1, n + 1)
    def ce_np(conf, acc, n, norm):
        b = np.linspace(0, 1, n + 1).astype(np.float32)
        idx = np.searchsorted(b, conf.astype(np.float32), side="right") - 1
        gaps, props = [], []
        for i in range(n + 1):
            sel = idx == i
            if sel.any():
                gaps.append(abs(acc[sel].mean() - conf[sel].mean()))
                props.append(sel.mean())
        gaps, props = np.array(gaps), np.array(props)
        return {"l1": (gaps * props).sum(), "l2": np.sqrt((gaps ** 2 * props).sum()), "max": gaps.max()}[norm]

    ex = np.exp(logits - logits.max(1, keepdims=True))
    prob = ex / ex.sum(1, keepdims=True)
    for norm in ("l1", "l2", "max"):
        np.testing.assert_allclose(out[f"bce_{norm}"], ce_np(s64, btarget.astype(float), 5, norm), rtol=1e-5)
        np.testing.assert_allclose(out[f"mce_{norm}"], ce_np(prob.max(1), (prob.argmax(1) == target).astype(float),
                                                             4, norm), rtol=1e-5)


def test_torchmetrics_classification_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _page(tm_classification_page), tm_classification_page(torch)
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].shape == b[k].shape, (k, a[k].shape, b[k].shape)
            assert a[k].dtype == b[k].dtype, (k, a[k].dtype, b[k].dtype)
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-7, err_msg=k)
        else:
            assert a[k] == b[k], k


# ================================================================ torchmetrics regression
def tm_regression(torch):
    u = tm_utils(torch)
    _safe_xlogy = u._safe_xlogy

    # ---- mse.py
    def _mean_squared_error_update(preds, target, num_outputs):
        if num_outputs == 1:
            preds = preds.view(-1)
            target = target.view(-1)
        diff = preds - target
        sum_squared_error = torch.sum(diff * diff, dim=0)
        return sum_squared_error, target.shape[0]

    def _mean_squared_error_compute(sum_squared_error, num_obs, squared=True):
        return sum_squared_error / num_obs if squared else torch.sqrt(sum_squared_error / num_obs)

    def mean_squared_error(preds, target, squared=True, num_outputs=1):
        sum_squared_error, num_obs = _mean_squared_error_update(preds, target, num_outputs=num_outputs)
        return _mean_squared_error_compute(sum_squared_error, num_obs, squared=squared)

    # ---- r2.py
    def _r2_score_update(preds, target):
        if preds.ndim > 2:
            raise ValueError(
                "Expected both prediction and target to be 1D or 2D tensors,"
                f" but received tensors with dimension {preds.shape}"
            )

        sum_obs = torch.sum(target, dim=0)
        sum_squared_obs = torch.sum(target * target, dim=0)
        residual = target - preds
        rss = torch.sum(residual * residual, dim=0)
        n_obs = target.size(0)
        return sum_squared_obs, sum_obs, rss, n_obs

    def _r2_score_compute(sum_squared_obs, sum_obs, rss, n_obs, adjusted=0, multioutput="uniform_average"):
        if n_obs < 2:
            raise ValueError("Needs at least two samples to calculate r2 score.")

        mean_obs = sum_obs / n_obs
        tss = sum_squared_obs - sum_obs * mean_obs

        # Account for near constant targets
        cond_rss = ~torch.isclose(rss, torch.zeros_like(rss), atol=1e-4)
        cond_tss = ~torch.isclose(tss, torch.zeros_like(tss), atol=1e-4)
        cond = cond_rss & cond_tss

        raw_scores = torch.ones_like(rss)
        raw_scores[cond] = 1 - (rss[cond] / tss[cond])
        raw_scores[cond_rss & ~cond_tss] = 0.0

        if multioutput == "raw_values":
            r2 = raw_scores
        elif multioutput == "uniform_average":
            r2 = torch.mean(raw_scores)
        elif multioutput == "variance_weighted":
            tss_sum = torch.sum(tss)
            r2 = torch.sum(tss / tss_sum * raw_scores)
        else:
            raise ValueError(
                "Argument `multioutput` must be either `raw_values`,"
                f" `uniform_average` or `variance_weighted`. Received {multioutput}."
            )

        if adjusted < 0 or not isinstance(adjusted, int):
            raise ValueError("`adjusted` parameter should be an integer larger or equal to 0.")

        if adjusted != 0:
            if adjusted > n_obs - 1:
                warnings.warn("More independent regressions than data points in"
                              " adjusted r2 score. Falls back to standard r2 score.", UserWarning)
            elif adjusted == n_obs - 1:
                warnings.warn("Division by zero in adjusted r2 score. Falls back to standard r2 score.", UserWarning)
            else:
                return 1 - (1 - r2) * (n_obs - 1) / (n_obs - adjusted - 1)
        return r2

    def r2_score(preds, target, adjusted=0, multioutput="uniform_average"):
        sum_squared_obs, sum_obs, rss, n_obs = _r2_score_update(preds, target)
        return _r2_score_compute(sum_squared_obs, sum_obs, rss, n_obs, adjusted, multioutput)

    # ---- pearson.py
    def _pearson_corrcoef_update(preds, target, mean_x, mean_y, var_x, var_y, corr_xy, num_prior, num_outputs):
        num_obs = preds.shape[0]
        cond = num_prior.mean() > 0 or num_obs == 1

        if cond:
            mx_new = (num_prior * mean_x + preds.sum(0)) / (num_prior + num_obs)
            my_new = (num_prior * mean_y + target.sum(0)) / (num_prior + num_obs)
        else:
            mx_new = preds.mean(0).to(mean_x.dtype)
            my_new = target.mean(0).to(mean_y.dtype)

        num_prior += num_obs

        if cond:
            var_x += ((preds - mx_new) * (preds - mean_x)).sum(0)
            var_y += ((target - my_new) * (target - mean_y)).sum(0)
        else:
            var_x += preds.var(0) * (num_obs - 1)
            var_y += target.var(0) * (num_obs - 1)
        corr_xy += ((preds - mx_new) * (target - mean_y)).sum(0)
        mean_x = mx_new
        mean_y = my_new

        return mean_x, mean_y, var_x, var_y, corr_xy, num_prior

    def _pearson_corrcoef_compute(var_x, var_y, corr_xy, nb):
        # prevent overwrite the inputs
        var_x = var_x / (nb - 1)
        var_y = var_y / (nb - 1)
        corr_xy = corr_xy / (nb - 1)
        # if var_x, var_y is float16 and on cpu, make it bfloat16 as sqrt is not supported for float16
        # on cpu, remove this after https://github.com/pytorch/pytorch/issues/54774 is fixed
        if var_x.dtype == torch.float16 and var_x.device == torch.device("cpu"):
            var_x = var_x.bfloat16()
            var_y = var_y.bfloat16()

        bound = math.sqrt(torch.finfo(var_x.dtype).eps)
        if (var_x < bound).any() or (var_y < bound).any():
            warnings.warn(
                "The variance of predictions or target is close to zero. This can cause instability in Pearson"
                " correlation coefficient, leading to wrong results. Setting the correlation coefficient to nan.",
                UserWarning,
            )

        zero_var_mask = (var_x < bound) | (var_y < bound)
        corrcoef = torch.full_like(corr_xy, float("nan"), device=corr_xy.device, dtype=corr_xy.dtype)
        valid_mask = ~zero_var_mask

        if valid_mask.any():
            corrcoef[valid_mask] = (
                (corr_xy[valid_mask] / (var_x[valid_mask] * var_y[valid_mask]).sqrt()).squeeze().to(corrcoef.dtype)
            )
            corrcoef = torch.clamp(corrcoef, -1.0, 1.0)
        return corrcoef.squeeze()

    def pearson_corrcoef(preds, target):
        d = preds.shape[1] if preds.ndim == 2 else 1
        _temp = torch.zeros(d, dtype=preds.dtype, device=preds.device)
        mean_x, mean_y, var_x = _temp.clone(), _temp.clone(), _temp.clone()
        var_y, corr_xy, nb = _temp.clone(), _temp.clone(), _temp.clone()
        _, _, var_x, var_y, corr_xy, nb = _pearson_corrcoef_update(
            preds, target, mean_x, mean_y, var_x, var_y, corr_xy, nb,
            num_outputs=1 if preds.ndim == 1 else preds.shape[-1]
        )
        return _pearson_corrcoef_compute(var_x, var_y, corr_xy, nb)

    # ---- spearman.py
    def _find_repeats(data):
        """Find and return values which have repeats i.e. the same value are more than once in the tensor."""
        temp = data.detach().clone()
        temp = temp.sort()[0]

        change = torch.cat([torch.tensor([True], device=temp.device), temp[1:] != temp[:-1]])
        unique = temp[change]
        change_idx = torch.cat([torch.nonzero(change), torch.tensor([[temp.numel()]], device=temp.device)]).flatten()
        freq = change_idx[1:] - change_idx[:-1]
        atleast2 = freq > 1
        return unique[atleast2]

    def _rank_data(data):
        n = data.numel()
        rank = torch.empty_like(data)
        idx = data.argsort()
        rank[idx[:n]] = torch.arange(1, n + 1, dtype=data.dtype, device=data.device)

        repeats = _find_repeats(data)
        for r in repeats:
            condition = data == r
            rank[condition] = rank[condition].mean()
        return rank

    def _spearman_corrcoef_compute(preds, target, eps=1e-6):
        if preds.ndim == 1:
            preds = _rank_data(preds)
            target = _rank_data(target)
        else:
            preds = torch.stack([_rank_data(p) for p in preds.T]).T
            target = torch.stack([_rank_data(t) for t in target.T]).T

        preds_diff = preds - preds.mean(0)
        target_diff = target - target.mean(0)

        cov = (preds_diff * target_diff).mean(0)
        preds_std = torch.sqrt((preds_diff * preds_diff).mean(0))
        target_std = torch.sqrt((target_diff * target_diff).mean(0))

        corrcoef = cov / (preds_std * target_std + eps)
        return torch.clamp(corrcoef, -1.0, 1.0)

    def spearman_corrcoef(preds, target):
        if not (preds.is_floating_point() and target.is_floating_point()):
            raise TypeError("Expected `preds` and `target` both to be floating point tensors")
        return _spearman_corrcoef_compute(preds, target)

    # ---- explained_variance.py
    def _explained_variance_update(preds, target):
        num_obs = preds.size(0)
        sum_error = torch.sum(target - preds, dim=0)
        diff = target - preds
        sum_squared_error = torch.sum(diff * diff, dim=0)

        sum_target = torch.sum(target, dim=0)
        sum_squared_target = torch.sum(target * target, dim=0)

        return num_obs, sum_error, sum_squared_error, sum_target, sum_squared_target

    def _explained_variance_compute(num_obs, sum_error, sum_squared_error, sum_target, sum_squared_target,
                                    multioutput="uniform_average"):
        diff_avg = sum_error / num_obs
        numerator = sum_squared_error / num_obs - (diff_avg * diff_avg)

        target_avg = sum_target / num_obs
        denominator = sum_squared_target / num_obs - (target_avg * target_avg)

        # Take care of division by zero
        nonzero_numerator = numerator != 0
        nonzero_denominator = denominator != 0
        valid_score = nonzero_numerator & nonzero_denominator
        output_scores = torch.ones_like(diff_avg)
        output_scores[valid_score] = 1.0 - (numerator[valid_score] / denominator[valid_score])
        output_scores[nonzero_numerator & ~nonzero_denominator] = 0.0

        # Decide what to do in multioutput case
        # Todo: allow user to pass in tensor with weights
        if multioutput == "raw_values":
            return output_scores
        if multioutput == "uniform_average":
            return torch.mean(output_scores)
        denom_sum = torch.sum(denominator)
        return torch.sum(denominator / denom_sum * output_scores)

    def explained_variance(preds, target, multioutput="uniform_average"):
        num_obs, sum_error, sum_squared_error, sum_target, sum_squared_target = _explained_variance_update(preds, target)
        return _explained_variance_compute(num_obs, sum_error, sum_squared_error, sum_target, sum_squared_target,
                                           multioutput)

    # ---- cosine_similarity.py
    def _cosine_similarity_update(preds, target):
        if preds.ndim != 2:
            raise ValueError(
                "Expected input to cosine similarity to be 2D tensors of shape `[N,D]` where `N` is the number of"
                f" samples and `D` is the number of dimensions, but got tensor of shape {preds.shape}"
            )
        preds = preds.float()
        target = target.float()
        return preds, target

    def _cosine_similarity_compute(preds, target, reduction="sum"):
        dot_product = (preds * target).sum(dim=-1)
        preds_norm = preds.norm(dim=-1)
        target_norm = target.norm(dim=-1)
        similarity = dot_product / (preds_norm * target_norm)
        reduction_mapping = {
            "sum": torch.sum,
            "mean": torch.mean,
            "none": lambda x: x,
            None: lambda x: x,
        }
        return reduction_mapping[reduction](similarity)

    def cosine_similarity(preds, target, reduction="sum"):
        preds, target = _cosine_similarity_update(preds, target)
        return _cosine_similarity_compute(preds, target, reduction)

    # ---- kl_divergence.py
    def _kld_update(p, q, log_prob):
        if p.ndim != 2 or q.ndim != 2:
            raise ValueError(f"Expected both p and q distribution to be 2D but got {p.ndim} and {q.ndim} respectively")

        total = p.shape[0]
        if log_prob:
            measures = torch.sum(p.exp() * (p - q), axis=-1)
        else:
            p = p / p.sum(axis=-1, keepdim=True)
            q = q / q.sum(axis=-1, keepdim=True)
            measures = _safe_xlogy(p, p / q).sum(axis=-1)

        return measures, total

    def _kld_compute(measures, total, reduction="mean"):
        if reduction == "sum":
            return measures.sum()
        if reduction == "mean":
            return measures.sum() / total
        if reduction is None or reduction == "none":
            return measures
        return measures / total

    def kl_divergence(p, q, log_prob=False, reduction="mean"):
        measures, total = _kld_update(p, q, log_prob)
        return _kld_compute(measures, total, reduction)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


def _reg_data():
    rng = np.random.default_rng(5)
    target = rng.standard_normal((12, 3))
    preds = target * np.array([0.9, -0.4, 0.0]) + 0.3 * rng.standard_normal((12, 3))
    target[:, 2] = 1.5  # a constant column: r2's and explained variance's special cases
    p = rng.uniform(0.05, 1.0, (4, 5))
    p[0, 1] = 0.0  # 0 * log(0 / q) counts as 0 (_safe_xlogy)
    q = rng.uniform(0.05, 1.0, (4, 5))
    ties = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 8.0])
    return preds, target, p, q, ties


def tm_regression_page(torch):
    m = tm_regression(torch)
    preds, target, p, q, ties = _reg_data()
    P, T = torch.tensor(preds), torch.tensor(target)
    out = {}
    out["mse"] = _np(m.mean_squared_error(P, T))
    out["rmse_cols"] = _np(m.mean_squared_error(P, T, squared=False, num_outputs=3))
    out["r2_raw"] = _np(m.r2_score(P, T, multioutput="raw_values"))
    out["r2_two"] = _np(m.r2_score(P[:, :2], T[:, :2]))
    out["r2_vw"] = _np(m.r2_score(P[:, :2], T[:, :2], multioutput="variance_weighted"))
    out["r2_adj"] = _np(m.r2_score(P[:, 0], T[:, 0], adjusted=2))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out["r2_adj_fallback"] = _np(m.r2_score(P[:3, 0], T[:3, 0], adjusted=2))
    out["r2_adj_warned"] = any("Division by zero" in str(i.message) for i in w)
    out["pearson"] = _np(m.pearson_corrcoef(P[:, 0], T[:, 0]))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out["pearson_cols"] = _np(m.pearson_corrcoef(P, T))  # column 2 of target is constant: nan
    out["pearson_warned"] = any("close to zero" in str(i.message) for i in w)
    # streaming: the metric's state after two updates equals one update on all rows
    d = 2
    st = [torch.zeros(d, dtype=P.dtype) for _ in range(6)]
    st = m._pearson_corrcoef_update(P[:5, :2], T[:5, :2], *st, num_outputs=d)
    st = m._pearson_corrcoef_update(P[5:, :2], T[5:, :2], *st, num_outputs=d)
    out["pearson_stream"] = _np(m._pearson_corrcoef_compute(st[2], st[3], st[4], st[5]))
    out["rank"] = _np(m._rank_data(torch.tensor(ties)))
    out["repeats"] = _np(m._find_repeats(torch.tensor(ties)))
    out["spearman"] = _np(m.spearman_corrcoef(torch.tensor(ties), T[:, 0]))
    out["spearman_cols"] = _np(m.spearman_corrcoef(P[:, :2], T[:, :2]))
    out["ev_raw"] = _np(m.explained_variance(P, T, multioutput="raw_values"))
    out["ev_vw"] = _np(m.explained_variance(P, T, multioutput="variance_weighted"))
    out["cos_none"] = _np(m.cosine_similarity(P, T, reduction="none"))
    out["cos_sum"] = _np(m.cosine_similarity(P, T))
    out["cos_mean"] = _np(m.cosine_similarity(P, T, reduction="mean"))
    pt, qt = torch.tensor(p), torch.tensor(q)
    out["kld"] = _np(m.kl_divergence(pt, qt))
    out["kld_none"] = _np(m.kl_divergence(pt, qt, reduction="none"))
    lp = torch.log_softmax(torch.tensor(q), -1)
    lq = torch.log_softmax(torch.tensor(p + 0.1), -1)
    out["kld_log_sum"] = _np(m.kl_divergence(lp, lq, log_prob=True, reduction="sum"))
    return out


def _ranks_np(x):
    # rank = 1 + number smaller + (number equal - 1) / 2
    return np.array([1 + (x < v).sum() + ((x == v).sum() - 1) / 2 for v in x])


def test_torchmetrics_regression():
    out = _page(tm_regression_page)
    preds, target, p, q, ties = _reg_data()
    np.testing.assert_allclose(out["mse"], ((preds - target) ** 2).mean(), rtol=1e-12)
    np.testing.assert_allclose(out["rmse_cols"], np.sqrt(((preds - target) ** 2).mean(0)), rtol=1e-12)
    rss = ((target - preds) ** 2).sum(0)
    tss = ((target - target.mean(0)) ** 2).sum(0)
    r2 = 1 - rss[:2] / tss[:2]
    np.testing.assert_allclose(out["r2_raw"], np.r_[r2, 0.0], rtol=1e-10)  # constant target, rss > 0: 0
    np.testing.assert_allclose(out["r2_two"], r2.mean(), rtol=1e-10)
    np.testing.assert_allclose(out["r2_vw"], (tss[:2] * r2).sum() / tss[:2].sum(), rtol=1e-10)
    np.testing.assert_allclose(out["r2_adj"], 1 - (1 - r2[0]) * 11 / 9, rtol=1e-10)
    rss3 = ((target[:3, 0] - preds[:3, 0]) ** 2).sum()
    tss3 = ((target[:3, 0] - target[:3, 0].mean()) ** 2).sum()
    np.testing.assert_allclose(out["r2_adj_fallback"], 1 - rss3 / tss3, rtol=1e-10)
    assert out["r2_adj_warned"]
    corr = [np.corrcoef(preds[:, j], target[:, j])[0, 1] for j in range(2)]
    np.testing.assert_allclose(out["pearson"], corr[0], rtol=1e-10)
    np.testing.assert_allclose(out["pearson_cols"][:2], corr, rtol=1e-10)
    assert np.isnan(out["pearson_cols"][2]) and out["pearson_warned"]
    np.testing.assert_allclose(out["pearson_stream"], corr, rtol=1e-10)
    np.testing.assert_allclose(out["rank"], _ranks_np(ties), rtol=0)
    np.testing.assert_array_equal(out["repeats"], [1.0, 3.0, 5.0])
    rx, ry = _ranks_np(ties), _ranks_np(target[:, 0])
    sp = np.mean((rx - rx.mean()) * (ry - ry.mean())) / (rx.std() * ry.std() + 1e-6)
    np.testing.assert_allclose(out["spearman"], sp, rtol=1e-10)
    sps = []
    for j in range(2):
        rx, ry = _ranks_np(preds[:, j]), _ranks_np(target[:, j])
        sps.append(np.mean((rx - rx.mean()) * (ry - ry.mean())) / (rx.std() * ry.std() + 1e-6))
    np.testing.assert_allclose(out["spearman_cols"], sps, rtol=1e-10)
    ev = 1 - np.var(target - preds, 0) / np.var(target, 0).clip(1e-300)
    np.testing.assert_allclose(out["ev_raw"], np.r_[ev[:2], 0.0], rtol=1e-10)  # constant target: 0
    den = np.var(target, 0)
    assert den[2] == 0
    np.testing.assert_allclose(out["ev_vw"], (den[:2] * ev[:2]).sum() / den.sum(), rtol=1e-6)
    a, b = preds.astype(np.float32).astype(np.float64), target.astype(np.float32).astype(np.float64)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert out["cos_none"].dtype == np.float32  # `.float()` in the update
    np.testing.assert_allclose(out["cos_none"], cos, rtol=1e-5)
    np.testing.assert_allclose(out["cos_sum"], cos.sum(), rtol=1e-5)
    np.testing.assert_allclose(out["cos_mean"], cos.mean(), rtol=1e-5)
    pn, qn = p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(pn > 0, pn * np.log(pn / qn), 0.0).sum(1)
    np.testing.assert_allclose(out["kld_none"], kl, rtol=1e-10)
    np.testing.assert_allclose(out["kld"], kl.mean(), rtol=1e-10)
    lp = q - np.log(np.exp(q).sum(1, keepdims=True))
    lq = (p + 0.1) - np.log(np.exp(p + 0.1).sum(1, keepdims=True))
    np.testing.assert_allclose(out["kld_log_sum"], (np.exp(lp) * (lp - lq)).sum(), rtol=1e-10)


def test_torchmetrics_regression_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _page(tm_regression_page), tm_regression_page(torch)
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, (k, a[k].shape, b[k].shape)
            np.testing.assert_allclose(a[k], b[k], rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=k)
        else:
            assert a[k] == b[k], k


# ================================================================ torchaudio functional
def ta_functional(torch):
    """src/torchaudio/functional/functional.py and filtering.py."""
    F = torch.nn.functional

    def spectrogram(waveform, pad, window, n_fft, hop_length, win_length, power, normalized, center=True,
                    pad_mode="reflect", onesided=True, return_complex=None):
        if return_complex is not None:
            warnings.warn(
                "`return_complex` argument is now deprecated and is not effective."
                "`torchaudio.functional.spectrogram(power=None)` always returns a tensor with "
                "complex dtype. Please remove the argument in the function call."
            )

        if pad > 0:
            # TODO add "with torch.no_grad():" back when JIT supports it
            waveform = torch.nn.functional.pad(waveform, (pad, pad), "constant")

        frame_length_norm, window_norm = _get_spec_norms(normalized)

        # pack batch
        shape = waveform.size()
        waveform = waveform.reshape(-1, shape[-1])

        # default values are consistent with librosa.core.spectrum._spectrogram
        spec_f = torch.stft(
            input=waveform,
            n_fft=n_fft,
            hop_length=hop_length,
            win_length=win_length,
            window=window,
            center=center,
            pad_mode=pad_mode,
            normalized=frame_length_norm,
            onesided=onesided,
            return_complex=True,
        )

        # unpack batch
        spec_f = spec_f.reshape(shape[:-1] + spec_f.shape[-2:])

        if window_norm:
            spec_f /= window.pow(2.0).sum().sqrt()
        if power is not None:
            if power == 1.0:
                return spec_f.abs()
            return spec_f.abs().pow(power)
        return spec_f

    def inverse_spectrogram(spectrogram, length, pad, window, n_fft, hop_length, win_length, normalized,
                            center=True, pad_mode="reflect", onesided=True):
        frame_length_norm, window_norm = _get_spec_norms(normalized)

        if not spectrogram.is_complex():
            raise ValueError("Expected `spectrogram` to be complex dtype.")

        if window_norm:
            spectrogram = spectrogram * window.pow(2.0).sum().sqrt()

        # pack batch
        shape = spectrogram.size()
        spectrogram = spectrogram.reshape(-1, shape[-2], shape[-1])

        # default values are consistent with librosa.core.spectrum._spectrogram
        waveform = torch.istft(
            input=spectrogram,
            n_fft=n_fft,
            hop_length=hop_length,
            win_length=win_length,
            window=window,
            center=center,
            normalized=frame_length_norm,
            onesided=onesided,
            length=length + 2 * pad if length is not None else None,
            return_complex=False,
        )

        if length is not None and pad > 0:
            # remove padding from front and back
            waveform = waveform[:, pad:-pad]

        # unpack batch
        waveform = waveform.reshape(shape[:-2] + waveform.shape[-1:])

        return waveform

    def _get_spec_norms(normalized):
        frame_length_norm, window_norm = False, False
        if isinstance(normalized, str):
            if normalized not in ["frame_length", "window"]:
                raise ValueError("Invalid normalized parameter: {}".format(normalized))
            if normalized == "frame_length":
                frame_length_norm = True
            elif normalized == "window":
                window_norm = True
        elif isinstance(normalized, bool):
            if normalized:
                window_norm = True
        else:
            raise TypeError("Input type not supported")
        return frame_length_norm, window_norm

    def _get_complex_dtype(real_dtype):
        if real_dtype == torch.double:
            return torch.cdouble
        if real_dtype == torch.float:
            return torch.cfloat
        if real_dtype == torch.half:
            return torch.complex32
        raise ValueError(f"Unexpected dtype {real_dtype}")

    def griffinlim(specgram, window, n_fft, hop_length, win_length, power, n_iter, momentum, length, rand_init):
        if not 0 <= momentum < 1:
            raise ValueError("momentum must be in range [0, 1). Found: {}".format(momentum))

        momentum = momentum / (1 + momentum)

        # pack batch
        shape = specgram.size()
        specgram = specgram.reshape([-1] + list(shape[-2:]))

        specgram = specgram.pow(1 / power)

        # initialize the phase
        if rand_init:
            angles = torch.rand(specgram.size(), dtype=_get_complex_dtype(specgram.dtype), device=specgram.device)
        else:
            angles = torch.full(specgram.size(), 1, dtype=_get_complex_dtype(specgram.dtype), device=specgram.device)

        # And initialize the previous iterate to 0
        tprev = torch.tensor(0.0, dtype=specgram.dtype, device=specgram.device)
        for _ in range(n_iter):
            # Invert with our current estimate of the phases
            inverse = torch.istft(
                specgram * angles, n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window,
                length=length
            )

            # Rebuild the spectrogram
            rebuilt = torch.stft(
                input=inverse,
                n_fft=n_fft,
                hop_length=hop_length,
                win_length=win_length,
                window=window,
                center=True,
                pad_mode="reflect",
                normalized=False,
                onesided=True,
                return_complex=True,
            )

            # Update our phase estimates
            angles = rebuilt
            if momentum:
                angles = angles - tprev.mul_(momentum)
            angles = angles.div(angles.abs().add(1e-16))

            # Store the previous iterate
            tprev = rebuilt

        # Return the final phase estimates
        waveform = torch.istft(
            specgram * angles, n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window, length=length
        )

        # unpack batch
        waveform = waveform.reshape(shape[:-2] + waveform.shape[-1:])

        return waveform

    def amplitude_to_DB(x, multiplier, amin, db_multiplier, top_db=None):
        x_db = multiplier * torch.log10(torch.clamp(x, min=amin))
        x_db -= multiplier * db_multiplier

        if top_db is not None:
            # Expand batch
            shape = x_db.size()
            packed_channels = shape[-3] if x_db.dim() > 2 else 1
            x_db = x_db.reshape(-1, packed_channels, shape[-2], shape[-1])

            x_db = torch.max(x_db, (x_db.amax(dim=(-3, -2, -1)) - top_db).view(-1, 1, 1, 1))

            # Repack batch
            x_db = x_db.reshape(shape)

        return x_db

    def DB_to_amplitude(x, ref, power):
        return ref * torch.pow(torch.pow(10.0, 0.1 * x), power)

    def _hz_to_mel(freq, mel_scale="htk"):
        if mel_scale not in ["slaney", "htk"]:
            raise ValueError('mel_scale should be one of "htk" or "slaney".')

        if mel_scale == "htk":
            return 2595.0 * math.log10(1.0 + (freq / 700.0))

        # Fill in the linear part
        f_min = 0.0
        f_sp = 200.0 / 3

        mels = (freq - f_min) / f_sp

        # Fill in the log-scale part
        min_log_hz = 1000.0
        min_log_mel = (min_log_hz - f_min) / f_sp
        logstep = math.log(6.4) / 27.0

        if freq >= min_log_hz:
            mels = min_log_mel + math.log(freq / min_log_hz) / logstep

        return mels

    def _mel_to_hz(mels, mel_scale="htk"):
        if mel_scale not in ["slaney", "htk"]:
            raise ValueError('mel_scale should be one of "htk" or "slaney".')

        if mel_scale == "htk":
            return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)

        # Fill in the linear scale
        f_min = 0.0
        f_sp = 200.0 / 3
        freqs = f_min + f_sp * mels

        # And now the nonlinear scale
        min_log_hz = 1000.0
        min_log_mel = (min_log_hz - f_min) / f_sp
        logstep = math.log(6.4) / 27.0

        log_t = mels >= min_log_mel
        freqs[log_t] = min_log_hz * torch.exp(logstep * (mels[log_t] - min_log_mel))

        return freqs

    def _create_triangular_filterbank(all_freqs, f_pts):
        # Adopted from Librosa
        # calculate the difference between each filter mid point and each stft freq point in hertz
        f_diff = f_pts[1:] - f_pts[:-1]  # (n_filter + 1)
        slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)  # (n_freqs, n_filter + 2)
        # create overlapping triangles
        zero = torch.zeros(1)
        down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]  # (n_freqs, n_filter)
        up_slopes = slopes[:, 2:] / f_diff[1:]  # (n_freqs, n_filter)
        fb = torch.max(zero, torch.min(down_slopes, up_slopes))

        return fb

    def melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate, norm=None, mel_scale="htk"):
        if norm is not None and norm != "slaney":
            raise ValueError('norm must be one of None or "slaney"')

        # freq bins
        all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)

        # calculate mel freq bins
        m_min = _hz_to_mel(f_min, mel_scale=mel_scale)
        m_max = _hz_to_mel(f_max, mel_scale=mel_scale)

        m_pts = torch.linspace(m_min, m_max, n_mels + 2)
        f_pts = _mel_to_hz(m_pts, mel_scale=mel_scale)

        # create filterbank
        fb = _create_triangular_filterbank(all_freqs, f_pts)

        if norm is not None and norm == "slaney":
            # Slaney-style mel is scaled to be approx constant energy per channel
            enorm = 2.0 / (f_pts[2: n_mels + 2] - f_pts[:n_mels])
            fb *= enorm.unsqueeze(0)

        if (fb.max(dim=0).values == 0.0).any():
            warnings.warn(
                "At least one mel filterbank has all zero values. "
                f"The value for `n_mels` ({n_mels}) may be set too high. "
                f"Or, the value for `n_freqs` ({n_freqs}) may be set too low."
            )

        return fb

    def create_dct(n_mfcc, n_mels, norm):
        if norm is not None and norm != "ortho":
            raise ValueError('norm must be either "ortho" or None')

        # http://en.wikipedia.org/wiki/Discrete_cosine_transform#DCT-II
        n = torch.arange(float(n_mels))
        k = torch.arange(float(n_mfcc)).unsqueeze(1)
        dct = torch.cos(math.pi / float(n_mels) * (n + 0.5) * k)  # size (n_mfcc, n_mels)

        if norm is None:
            dct *= 2.0
        else:
            dct[0] *= 1.0 / math.sqrt(2.0)
            dct *= math.sqrt(2.0 / float(n_mels))
        return dct.t()

    def mu_law_encoding(x, quantization_channels):
        mu = quantization_channels - 1.0
        if not x.is_floating_point():
            warnings.warn(
                "The input Tensor must be of floating type. \
                This will be an error in the v0.12 release."
            )
            x = x.to(torch.float)
        mu = torch.tensor(mu, dtype=x.dtype)
        x_mu = torch.sign(x) * torch.log1p(mu * torch.abs(x)) / torch.log1p(mu)
        x_mu = ((x_mu + 1) / 2 * mu + 0.5).to(torch.int64)
        return x_mu

    def mu_law_decoding(x_mu, quantization_channels):
        mu = quantization_channels - 1.0
        if not x_mu.is_floating_point():
            x_mu = x_mu.to(torch.float)
        mu = torch.tensor(mu, dtype=x_mu.dtype)
        x = ((x_mu) / mu) * 2 - 1.0
        x = torch.sign(x) * (torch.exp(torch.abs(x) * torch.log1p(mu)) - 1.0) / mu
        return x

    def compute_deltas(specgram, win_length=5, mode="replicate"):
        device = specgram.device
        dtype = specgram.dtype

        # pack batch
        shape = specgram.size()
        specgram = specgram.reshape(1, -1, shape[-1])

        if win_length < 3:
            raise ValueError(f"Window length should be greater than or equal to 3. Found win_length {win_length}")

        n = (win_length - 1) // 2

        # twice sum of integer squared
        denom = n * (n + 1) * (2 * n + 1) / 3

        specgram = torch.nn.functional.pad(specgram, (n, n), mode=mode)

        kernel = torch.arange(-n, n + 1, 1, device=device, dtype=dtype).repeat(specgram.shape[1], 1, 1)

        output = torch.nn.functional.conv1d(specgram, kernel, groups=specgram.shape[1]) / denom

        # unpack batch
        output = output.reshape(shape)

        return output

    def _compute_nccf(waveform, sample_rate, frame_time, freq_low):
        EPSILON = 10 ** (-9)

        # Number of lags to check
        lags = int(math.ceil(sample_rate / freq_low))

        frame_size = int(math.ceil(sample_rate * frame_time))

        waveform_length = waveform.size()[-1]
        num_of_frames = int(math.ceil(waveform_length / frame_size))

        p = lags + num_of_frames * frame_size - waveform_length
        waveform = torch.nn.functional.pad(waveform, (0, p))

        # Compute lags
        output_lag = []
        for lag in range(1, lags + 1):
            s1 = waveform[..., :-lag].unfold(-1, frame_size, frame_size)[..., :num_of_frames, :]
            s2 = waveform[..., lag:].unfold(-1, frame_size, frame_size)[..., :num_of_frames, :]

            output_frames = (
                (s1 * s2).sum(-1)
                / (EPSILON + torch.linalg.vector_norm(s1, ord=2, dim=-1)).pow(2)
                / (EPSILON + torch.linalg.vector_norm(s2, ord=2, dim=-1)).pow(2)
            )

            output_lag.append(output_frames.unsqueeze(-1))

        nccf = torch.cat(output_lag, -1)

        return nccf

    def _combine_max(a, b, thresh=0.99):
        mask = a[0] > thresh * b[0]
        values = mask * a[0] + ~mask * b[0]
        indices = mask * a[1] + ~mask * b[1]
        return values, indices

    def _find_max_per_frame(nccf, sample_rate, freq_high):
        lag_min = int(math.ceil(sample_rate / freq_high))

        # Find near enough max that is smallest

        best = torch.max(nccf[..., lag_min:], -1)

        half_size = nccf.shape[-1] // 2
        half = torch.max(nccf[..., lag_min:half_size], -1)

        best = _combine_max(half, best)
        indices = best[1]

        # Add back minimal lag
        indices += lag_min
        # Add 1 empirical calibration offset
        indices += 1

        return indices

    def _median_smoothing(indices, win_length):
        # Centered windowed
        pad_length = (win_length - 1) // 2

        # "replicate" padding in any dimension
        indices = torch.nn.functional.pad(indices, (pad_length, 0), mode="constant", value=0.0)

        indices[..., :pad_length] = torch.cat(pad_length * [indices[..., pad_length].unsqueeze(-1)], dim=-1)
        roll = indices.unfold(-1, win_length, 1)

        values, _ = torch.median(roll, -1)
        return values

    def detect_pitch_frequency(waveform, sample_rate, frame_time=10 ** (-2), win_length=30, freq_low=85,
                               freq_high=3400):
        # pack batch
        shape = list(waveform.size())
        waveform = waveform.reshape([-1] + shape[-1:])

        nccf = _compute_nccf(waveform, sample_rate, frame_time, freq_low)
        indices = _find_max_per_frame(nccf, sample_rate, freq_high)
        indices = _median_smoothing(indices, win_length)

        # Convert indices to frequency
        EPSILON = 10 ** (-9)
        freq = sample_rate / (EPSILON + indices.to(torch.float))

        # unpack batch
        freq = freq.reshape(shape[:-1] + list(freq.shape[-1:]))

        return freq

    def spectral_centroid(waveform, sample_rate, pad, window, n_fft, hop_length, win_length):
        specgram = spectrogram(
            waveform,
            pad=pad,
            window=window,
            n_fft=n_fft,
            hop_length=hop_length,
            win_length=win_length,
            power=1.0,
            normalized=False,
        )
        freqs = torch.linspace(0, sample_rate // 2, steps=1 + n_fft // 2, device=specgram.device).reshape((-1, 1))
        freq_dim = -2
        return (freqs * specgram).sum(dim=freq_dim) / specgram.sum(dim=freq_dim)

    def _get_sinc_resample_kernel(orig_freq, new_freq, gcd, lowpass_filter_width=6, rolloff=0.99,
                                  resampling_method="sinc_interp_hann", beta=None, device=torch.device("cpu"),
                                  dtype=None):
        if not (int(orig_freq) == orig_freq and int(new_freq) == new_freq):
            raise Exception("Frequencies must be of integer type to ensure quality resampling computation. ")

        if resampling_method not in ["sinc_interp_hann", "sinc_interp_kaiser"]:
            raise ValueError("Invalid resampling method: {}".format(resampling_method))

        orig_freq = int(orig_freq) // gcd
        new_freq = int(new_freq) // gcd

        if lowpass_filter_width <= 0:
            raise ValueError("Low pass filter width should be positive.")
        base_freq = min(orig_freq, new_freq)
        # This will perform antialiasing filtering by removing the highest frequencies.
        # At first I thought I only needed this when downsampling, but when upsampling
        # you will get edge artifacts without this, as the edge is equivalent to zero padding,
        # which will add high freq artifacts.
        base_freq *= rolloff

        # The key idea of the algorithm is that x(t) can be exactly reconstructed from x[i] (tensor)
        # using the sinc interpolation formula:
        #   x(t) = sum_i x[i] sinc(pi * orig_freq * (i / orig_freq - t))
        # We can then sample the function x(t) with a different sample rate:
        #    y[j] = x(j / new_freq)
        # or,
        #    y[j] = sum_i x[i] sinc(pi * orig_freq * (i / orig_freq - j / new_freq))
        width = math.ceil(lowpass_filter_width * orig_freq / base_freq)
        idx_dtype = dtype if dtype is not None else torch.float64

        idx = torch.arange(-width, width + orig_freq, dtype=idx_dtype, device=device)[None, None] / orig_freq

        t = torch.arange(0, -new_freq, -1, dtype=dtype, device=device)[:, None, None] / new_freq + idx
        t *= base_freq
        t = t.clamp_(-lowpass_filter_width, lowpass_filter_width)

        # we do not use built in torch windows here as we need to evaluate the window
        # at specific positions, not over a regular grid.
        if resampling_method == "sinc_interp_hann":
            window = torch.cos(t * math.pi / lowpass_filter_width / 2) ** 2
        else:
            # sinc_interp_kaiser
            if beta is None:
                beta = 14.769656459379492
            beta_tensor = torch.tensor(float(beta))
            window = torch.i0(beta_tensor * torch.sqrt(1 - (t / lowpass_filter_width) ** 2)) / torch.i0(beta_tensor)

        t *= math.pi

        scale = base_freq / orig_freq
        kernels = torch.where(t == 0, torch.tensor(1.0).to(t), t.sin() / t)
        kernels *= window * scale

        if dtype is None:
            kernels = kernels.to(dtype=torch.float32)

        return kernels, width

    def _apply_sinc_resample_kernel(waveform, orig_freq, new_freq, gcd, kernel, width):
        if not waveform.is_floating_point():
            raise TypeError(f"Expected floating point type for waveform tensor, but received {waveform.dtype}.")

        orig_freq = int(orig_freq) // gcd
        new_freq = int(new_freq) // gcd

        # pack batch
        shape = waveform.size()
        waveform = waveform.view(-1, shape[-1])

        num_wavs, length = waveform.shape
        waveform = torch.nn.functional.pad(waveform, (width, width + orig_freq))
        resampled = torch.nn.functional.conv1d(waveform[:, None], kernel, stride=orig_freq)
        resampled = resampled.transpose(1, 2).reshape(num_wavs, -1)
        target_length = torch.ceil(torch.as_tensor(new_freq * length / orig_freq)).long()
        resampled = resampled[..., :target_length]

        # unpack batch
        resampled = resampled.view(shape[:-1] + resampled.shape[-1:])
        return resampled

    def resample(waveform, orig_freq, new_freq, lowpass_filter_width=6, rolloff=0.99,
                 resampling_method="sinc_interp_hann", beta=None):
        if orig_freq <= 0.0 or new_freq <= 0.0:
            raise ValueError("Original frequency and desired frequecy should be positive")

        if orig_freq == new_freq:
            return waveform

        gcd = math.gcd(int(orig_freq), int(new_freq))

        kernel, width = _get_sinc_resample_kernel(
            orig_freq,
            new_freq,
            gcd,
            lowpass_filter_width,
            rolloff,
            resampling_method,
            beta,
            waveform.device,
            waveform.dtype,
        )
        resampled = _apply_sinc_resample_kernel(waveform, orig_freq, new_freq, gcd, kernel, width)
        return resampled

    # ---- filtering.py
    def gain(waveform, gain_db=1.0):
        if gain_db == 0:
            return waveform

        ratio = 10 ** (gain_db / 20)

        return waveform * ratio

    def _lfilter_core_generic_loop(input_signal_windows, a_coeffs_flipped, padded_output_waveform):
        n_order = a_coeffs_flipped.size(1)
        a_coeffs_flipped = a_coeffs_flipped.unsqueeze(2)
        for i_sample, o0 in enumerate(input_signal_windows.permute(2, 0, 1)):
            windowed_output_signal = padded_output_waveform[:, :, i_sample: i_sample + n_order]
            o0 -= (windowed_output_signal.transpose(0, 1) @ a_coeffs_flipped)[..., 0].t()
            padded_output_waveform[:, :, i_sample + n_order - 1] = o0

    def _lfilter_core(waveform, a_coeffs, b_coeffs):
        if a_coeffs.size() != b_coeffs.size():
            raise ValueError(
                "Expected coeffs to be the same size."
                f"Found a_coeffs size: {a_coeffs.size()}, b_coeffs size: {b_coeffs.size()}"
            )
        if waveform.ndim != 3:
            raise ValueError(f"Expected waveform to be 3 dimensional. Found: {waveform.ndim}")
        if not (waveform.device == a_coeffs.device == b_coeffs.device):
            raise ValueError(
                "Expected waveform and coeffs to be on the same device."
                f"Found: waveform device:{waveform.device}, a_coeffs device: {a_coeffs.device}, "
                f"b_coeffs device: {b_coeffs.device}"
            )

        n_batch, n_channel, n_sample = waveform.size()
        n_order = a_coeffs.size(1)
        if n_order <= 0:
            raise ValueError(f"Expected n_order to be positive. Found: {n_order}")

        # Pad the input and create output

        padded_waveform = torch.nn.functional.pad(waveform, [n_order - 1, 0])
        padded_output_waveform = torch.zeros_like(padded_waveform)

        # Set up the coefficients matrix
        # Flip coefficients' order
        a_coeffs_flipped = a_coeffs.flip(1)
        b_coeffs_flipped = b_coeffs.flip(1)

        # calculate windowed_input_signal in parallel using convolution
        input_signal_windows = torch.nn.functional.conv1d(padded_waveform, b_coeffs_flipped.unsqueeze(1),
                                                          groups=n_channel)

        input_signal_windows.div_(a_coeffs[:, :1])
        a_coeffs_flipped.div_(a_coeffs[:, :1])

        _lfilter_core_generic_loop(input_signal_windows, a_coeffs_flipped, padded_output_waveform)

        output = padded_output_waveform[:, :, n_order - 1:]
        return output

    _lfilter = _lfilter_core

    def lfilter(waveform, a_coeffs, b_coeffs, clamp=True, batching=True):
        if a_coeffs.size() != b_coeffs.size():
            raise ValueError(
                "Expected coeffs to be the same size."
                f"Found: a_coeffs size: {a_coeffs.size()}, b_coeffs size: {b_coeffs.size()}"
            )
        if a_coeffs.ndim > 2:
            raise ValueError(f"Expected coeffs to have greater than 1 dimension. Found: {a_coeffs.ndim}")

        if a_coeffs.ndim > 1:
            if batching:
                if waveform.ndim <= 0:
                    raise ValueError("Expected waveform to have a positive number of dimensions."
                                     f"Found: {waveform.ndim}")
                if waveform.shape[-2] != a_coeffs.shape[0]:
                    raise ValueError(
                        "Expected number of batches in waveform and coeffs to be the same."
                        f"Found: coeffs batches: {a_coeffs.shape[0]}, waveform batches: {waveform.shape[-2]}"
                    )
            else:
                waveform = torch.stack([waveform] * a_coeffs.shape[0], -2)
        else:
            a_coeffs = a_coeffs.unsqueeze(0)
            b_coeffs = b_coeffs.unsqueeze(0)

        # pack batch
        shape = waveform.size()
        waveform = waveform.reshape(-1, a_coeffs.shape[0], shape[-1])
        output = _lfilter(waveform, a_coeffs, b_coeffs)

        if clamp:
            output = torch.clamp(output, min=-1.0, max=1.0)

        # unpack batch
        output = output.reshape(shape[:-1] + output.shape[-1:])

        return output

    def biquad(waveform, b0, b1, b2, a0, a1, a2):
        device = waveform.device
        dtype = waveform.dtype

        b0 = torch.as_tensor(b0, dtype=dtype, device=device).view(1)
        b1 = torch.as_tensor(b1, dtype=dtype, device=device).view(1)
        b2 = torch.as_tensor(b2, dtype=dtype, device=device).view(1)
        a0 = torch.as_tensor(a0, dtype=dtype, device=device).view(1)
        a1 = torch.as_tensor(a1, dtype=dtype, device=device).view(1)
        a2 = torch.as_tensor(a2, dtype=dtype, device=device).view(1)

        output_waveform = lfilter(
            waveform,
            torch.cat([a0, a1, a2]),
            torch.cat([b0, b1, b2]),
        )
        return output_waveform

    def highpass_biquad(waveform, sample_rate, cutoff_freq, Q=0.707):
        dtype = waveform.dtype
        device = waveform.device
        cutoff_freq = torch.as_tensor(cutoff_freq, dtype=dtype, device=device)
        Q = torch.as_tensor(Q, dtype=dtype, device=device)

        w0 = 2 * math.pi * cutoff_freq / sample_rate
        alpha = torch.sin(w0) / 2.0 / Q

        b0 = (1 + torch.cos(w0)) / 2
        b1 = -1 - torch.cos(w0)
        b2 = b0
        a0 = 1 + alpha
        a1 = -2 * torch.cos(w0)
        a2 = 1 - alpha
        return biquad(waveform, b0, b1, b2, a0, a1, a2)

    def lowpass_biquad(waveform, sample_rate, cutoff_freq, Q=0.707):
        dtype = waveform.dtype
        device = waveform.device
        cutoff_freq = torch.as_tensor(cutoff_freq, dtype=dtype, device=device)
        Q = torch.as_tensor(Q, dtype=dtype, device=device)

        w0 = 2 * math.pi * cutoff_freq / sample_rate
        alpha = torch.sin(w0) / 2 / Q

        b0 = (1 - torch.cos(w0)) / 2
        b1 = 1 - torch.cos(w0)
        b2 = b0
        a0 = 1 + alpha
        a1 = -2 * torch.cos(w0)
        a2 = 1 - alpha
        return biquad(waveform, b0, b1, b2, a0, a1, a2)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


def _audio_data():
    rng = np.random.default_rng(23)
    x = rng.uniform(-0.5, 0.5, (2, 3, 40))
    sr = 8000
    tt = np.arange(64) / sr
    tone = 0.4 * np.sin(2 * np.pi * 1000 * tt) + 0.2 * np.sin(2 * np.pi * 2500 * tt + 0.3)
    # a little noise, so that no bin of the rebuilt spectra is a rounding residue whose phase
    # (Griffin-Lim normalises every bin to unit modulus) is the sign of noise
    tone = tone + 0.05 * rng.standard_normal(64)
    return x, sr, tone


def ta_page(torch):
    a = ta_functional(torch)
    x_np, sr, tone_np = _audio_data()
    x = torch.tensor(x_np)
    tone = torch.tensor(tone_np)
    n_fft, hop = 16, 4
    win = torch.hann_window(n_fft, dtype=torch.float64)
    out = {}
    out["spec_pow2_norm"] = _np(a.spectrogram(x, 2, win, n_fft, hop, n_fft, 2.0, True))
    out["spec_mag"] = _np(a.spectrogram(x, 0, win, n_fft, hop, n_fft, 1.0, False))
    win12 = torch.hann_window(12, dtype=torch.float64)
    out["spec_win12"] = _np(a.spectrogram(x[0, 0], 0, win12, n_fft, hop, 12, 2.0, False))
    cplx = a.spectrogram(x, 0, win, n_fft, hop, n_fft, None, "frame_length")
    out["spec_complex"] = _np(cplx)
    out["inv"] = _np(a.inverse_spectrogram(a.spectrogram(x, 3, win, n_fft, hop, n_fft, None, True), 40, 3, win,
                                           n_fft, hop, n_fft, True))
    out["inv_fl"] = _np(a.inverse_spectrogram(cplx, 40, 0, win, n_fft, hop, n_fft, "frame_length"))
    # Griffin-Lim from the magnitude of the tone: its spectral convergence after 1 and after 8 iterations
    mag2 = a.spectrogram(tone, 0, win, n_fft, hop, n_fft, 2.0, False)
    for it in (0, 1, 8):
        y = a.griffinlim(mag2, win, n_fft, hop, n_fft, 2.0, it, 0.99, 64, False)
        out[f"gl_{it}"] = _np(y)
        rebuilt = a.spectrogram(y, 0, win, n_fft, hop, n_fft, 1.0, False)
        out[f"gl_err_{it}"] = float(((rebuilt - mag2.sqrt()).norm() / mag2.sqrt().norm()).item())
    # dB
    p4 = a.spectrogram(x.reshape(1, 2, 3, 40), 0, win, n_fft, hop, n_fft, 2.0, False)
    p4 = p4 * torch.tensor([1.0, 1e-6], dtype=torch.float64).reshape(1, 2, 1, 1, 1)  # two batch items 60 dB apart
    out["db"] = _np(a.amplitude_to_DB(p4, 10.0, 1e-10, 0.0, top_db=30.0))
    out["db_3d"] = _np(a.amplitude_to_DB(p4[0, :, 0], 10.0, 1e-10, math.log10(2.0), top_db=30.0))
    out["db_amp"] = _np(a.amplitude_to_DB(p4[0, 0].sqrt(), 20.0, 1e-5, 0.0))
    out["db_back"] = _np(a.DB_to_amplitude(a.amplitude_to_DB(p4[0, 0], 10.0, 1e-30, 0.0), 1.0, 1.0))
    out["db_back_amp"] = _np(a.DB_to_amplitude(torch.tensor(out["db_amp"]), 1.0, 0.5))
    # mel and DCT
    out["fb_htk"] = _np(a.melscale_fbanks(33, 50.0, 3800.0, 6, sr))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["fb_slaney"] = _np(a.melscale_fbanks(33, 0.0, 4000.0, 6, sr, norm="slaney", mel_scale="slaney"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        a.melscale_fbanks(5, 0.0, 4000.0, 8, sr)
    out["fb_warned"] = any("all zero values" in str(i.message) for i in w)
    out["dct_none"] = _np(a.create_dct(4, 6, None))
    out["dct_ortho"] = _np(a.create_dct(6, 6, "ortho"))
    # mu-law
    # the grid from NumPy: PyTorch's float32 ``linspace`` (vector-width dependent) puts -1.5e-8 at the
    # middle, which mu-law maps to 127 where an exact 0 gives 128
    q = torch.tensor(np.linspace(-1.0, 1.0, 41).astype(np.float32))
    enc = a.mu_law_encoding(q, 256)
    out["mu_enc"] = _np(enc)
    out["mu_dec"] = _np(a.mu_law_decoding(enc, 256))
    # deltas
    out["deltas"] = _np(a.compute_deltas(x, win_length=5))
    out["deltas3"] = _np(a.compute_deltas(x[0], win_length=3))
    # pitch of a 200 Hz sine sampled at 4 kHz: a lag of 20 samples; median window 4 (even: lower median)
    sine = torch.sin(2 * math.pi * 200 * torch.arange(400, dtype=torch.float64) / 4000)
    out["pitch"] = _np(a.detect_pitch_frequency(torch.stack([sine, 0.5 * sine]), 4000, win_length=4))
    out["median"] = _np(a._median_smoothing(torch.tensor([[5, 1, 4, 2, 8, 3, 3]]), 4))
    out["centroid"] = _np(a.spectral_centroid(tone, sr, 0, win, n_fft, hop, n_fft))
    # resampling down (3 -> 2) and up (4 -> 6 = 2 -> 3 after the gcd)
    out["rs_down"] = _np(a.resample(x, 3, 2))
    out["rs_up"] = _np(a.resample(x[0], 4, 6, lowpass_filter_width=4, rolloff=0.9))
    out["rs_same"] = a.resample(x, 5, 5) is x
    kern, width = a._get_sinc_resample_kernel(3, 2, 1, 6, 0.99, "sinc_interp_kaiser", None, x.device, x.dtype)
    out["kaiser_kernel"], out["kaiser_width"] = _np(kern), width
    # filters
    out["gain"] = _np(a.gain(x, 6.0))
    out["gain0"] = a.gain(x, 0) is x
    b_c, a_c = torch.tensor([0.2, 0.3, 0.1], dtype=torch.float64), torch.tensor([1.2, -0.5, 0.25], dtype=torch.float64)
    out["lfilter"] = _np(a.lfilter(x, a_c, b_c, clamp=False))
    out["lfilter_clamped"] = _np(a.lfilter(4 * x, a_c, b_c))
    a2 = torch.stack([a_c, torch.tensor([1.0, 0.3, 0.0], dtype=torch.float64), a_c * 2])
    b2 = torch.stack([b_c, torch.tensor([0.5, 0.0, -0.5], dtype=torch.float64), b_c])
    out["lfilter_bank"] = _np(a.lfilter(x, a2, b2, clamp=False))
    out["lfilter_nobatch"] = _np(a.lfilter(x[0, 0], a2, b2, clamp=False, batching=False))
    step = 0.5 * torch.ones(1, 300, dtype=torch.float64)
    out["lowpass_step"] = _np(a.lowpass_biquad(step, sr, 500.0))
    out["highpass_step"] = _np(a.highpass_biquad(step, sr, 500.0))
    out["lowpass_x"] = _np(a.lowpass_biquad(x, sr, 1500.0, Q=0.9))
    return out


def _hann(n):
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def _stft_np(x, n_fft, hop, window):
    """Centered (reflect) frames times the window (zero-padded to n_fft at the centre), rfft per frame."""
    w = np.zeros(n_fft)
    left = (n_fft - len(window)) // 2
    w[left:left + len(window)] = window
    xp = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(n_fft // 2, n_fft // 2)], mode="reflect")
    nfr = 1 + (xp.shape[-1] - n_fft) // hop
    frames = np.stack([xp[..., i * hop:i * hop + n_fft] * w for i in range(nfr)], -2)
    return np.swapaxes(np.fft.rfft(frames, axis=-1), -1, -2)  # (..., freq, time)


def _hz_to_mel_np(f, scale):
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    f = np.asarray(f, float)
    return np.where(f >= 1000, 15 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27), f / (200 / 3))


def _mel_to_hz_np(m, scale):
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    return np.where(m >= 15, 1000 * np.exp(np.log(6.4) / 27 * (m - 15)), m * 200 / 3)


def _fbank_np(n_freqs, f_min, f_max, n_mels, sr, scale, norm):
    freqs = np.linspace(0, sr // 2, n_freqs)
    fp = _mel_to_hz_np(np.linspace(_hz_to_mel_np(f_min, scale), _hz_to_mel_np(f_max, scale), n_mels + 2), scale)
    fb = np.zeros((n_freqs, n_mels))
    for j in range(n_mels):
        lo, c, hi = fp[j], fp[j + 1], fp[j + 2]
        for i, f in enumerate(freqs):
            if lo < f <= c:
                fb[i, j] = (f - lo) / (c - lo)
            elif c < f < hi:
                fb[i, j] = (hi - f) / (hi - c)
        if norm:
            fb[:, j] *= 2.0 / (hi - lo)
    return fb


def _lfilter_np(x, a, b):
    y = np.zeros_like(x)
    for n in range(x.shape[-1]):
        acc = sum(b[k] * x[..., n - k] for k in range(len(b)) if n - k >= 0)
        acc = acc - sum(a[k] * y[..., n - k] for k in range(1, len(a)) if n - k >= 0)
        y[..., n] = acc / a[0]
    return y


def test_torchaudio_spectrogram_griffinlim_db_mel_dct():
    out = _page(ta_page)
    x, sr, tone = _audio_data()
    w = _hann(16)
    xp = np.pad(x, [(0, 0), (0, 0), (2, 2)])
    np.testing.assert_allclose(out["spec_pow2_norm"], np.abs(_stft_np(xp, 16, 4, w)) ** 2 / (w ** 2).sum(),
                               rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(out["spec_mag"], np.abs(_stft_np(x, 16, 4, w)), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(out["spec_win12"], np.abs(_stft_np(x[0, 0], 16, 4, _hann(12))) ** 2,
                               rtol=1e-10, atol=1e-14)
    assert out["spec_complex"].dtype == np.complex128
    np.testing.assert_allclose(out["spec_complex"], _stft_np(x, 16, 4, w) / 4.0, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(out["inv"], x, atol=1e-12)  # hann at hop n_fft/4: exact inversion
    np.testing.assert_allclose(out["inv_fl"], x, atol=1e-12)
    # Griffin-Lim: zero iterations = istft with zero phase; the error falls with the iterations
    assert out["gl_0"].shape == (64,)
    assert out["gl_err_8"] < 0.6 * out["gl_err_1"] < 0.6 * out["gl_err_0"], (out["gl_err_0"], out["gl_err_1"],
                                                                              out["gl_err_8"])
    # dB: per batch item, clamp at (its max - 30 dB)
    p4 = np.abs(_stft_np(x.reshape(1, 2, 3, 40), 16, 4, w)) ** 2 * np.array([1.0, 1e-6]).reshape(1, 2, 1, 1, 1)
    db = 10 * np.log10(np.maximum(p4, 1e-10))
    want = np.stack([np.maximum(db[:, i], db[:, i].max() - 30) for i in range(2)], 1)
    np.testing.assert_allclose(out["db"], want, rtol=1e-10)
    db3 = db[0, :, 0] - 10 * math.log10(2.0)  # 3-D input (the two items 60 dB apart): one cut-off for all
    np.testing.assert_allclose(out["db_3d"], np.maximum(db3, db3.max() - 30), rtol=1e-10)
    np.testing.assert_allclose(out["db_amp"], 20 * np.log10(np.maximum(np.sqrt(p4[0, 0]), 1e-5)), rtol=1e-10)
    np.testing.assert_allclose(out["db_back"], p4[0, 0], rtol=1e-10)
    np.testing.assert_allclose(out["db_back_amp"], np.maximum(np.sqrt(p4[0, 0]), 1e-5), rtol=1e-10)
    # mel filter banks: explicit triangles over the linear frequency grid
    np.testing.assert_allclose(out["fb_htk"], _fbank_np(33, 50.0, 3800.0, 6, sr, "htk", False), atol=2e-6)
    np.testing.assert_allclose(out["fb_slaney"], _fbank_np(33, 0.0, 4000.0, 6, sr, "slaney", True), atol=2e-8)
    assert out["fb_warned"]
    n, k = np.arange(6), np.arange(4)[:, None]
    np.testing.assert_allclose(out["dct_none"], 2 * np.cos(np.pi / 6 * (n + 0.5) * k).T, atol=1e-6)
    np.testing.assert_allclose(out["dct_ortho"].T @ out["dct_ortho"], np.eye(6), atol=1e-6)  # orthonormal DCT-II


def test_torchaudio_mulaw_deltas_pitch_centroid_resample():
    out = _page(ta_page)
    x, sr, tone = _audio_data()
    q = np.linspace(-1.0, 1.0, 41).astype(np.float32).astype(np.float64)
    mu = 255.0
    enc = ((np.sign(q) * np.log1p(mu * np.abs(q)) / np.log1p(mu) + 1) / 2 * mu + 0.5).astype(np.int64)
    np.testing.assert_array_equal(out["mu_enc"], enc)
    assert out["mu_enc"].min() == 0 and out["mu_enc"].max() == 255
    y = enc / mu * 2 - 1
    np.testing.assert_allclose(out["mu_dec"], np.sign(y) * ((1 + mu) ** np.abs(y) - 1) / mu, rtol=1e-5, atol=1e-6)
    assert np.abs(out["mu_dec"] - q).max() < 0.02  # companding error of 8-bit mu-law on [-1, 1]
    for key, wl, arr in (("deltas", 5, x), ("deltas3", 3, x[0])):
        nn = (wl - 1) // 2
        xp = np.concatenate([arr[..., :1]] * nn + [arr] + [arr[..., -1:]] * nn, -1)
        L = arr.shape[-1]
        want = sum(k * (xp[..., nn + k:nn + k + L] - xp[..., nn - k:nn - k + L]) for k in range(1, nn + 1))
        np.testing.assert_allclose(out[key], want / (2 * sum(k * k for k in range(1, nn + 1))), atol=1e-12)
    np.testing.assert_allclose(out["pitch"], 200.0, rtol=1e-9)
    assert out["pitch"].shape == (2, 8)  # 10 frames, median window 4 (pad 1) -> 8
    med = np.array([5, 5, 1, 4, 2, 8, 3, 3])  # left "replicate" pad of (4 - 1) // 2 = 1
    np.testing.assert_array_equal(out["median"], [[np.sort(med[i:i + 4])[1] for i in range(5)]])  # lower medians
    np.testing.assert_array_equal(out["median"], [[4, 2, 2, 3, 3]])
    mag = np.abs(_stft_np(tone, 16, 4, _hann(16)))
    freqs = np.linspace(0, sr // 2, 9)[:, None]
    np.testing.assert_allclose(out["centroid"], (freqs * mag).sum(0) / mag.sum(0), rtol=1e-10)

    def resample_np(sig, orig, new, lpw, rolloff):
        g = math.gcd(orig, new)
        orig, new = orig // g, new // g
        base = min(orig, new) * rolloff
        L = sig.shape[-1]
        J = math.ceil(new * L / orig)
        y = np.zeros(sig.shape[:-1] + (J,))
        for j in range(J):
            d = np.arange(L) / orig - j / new
            tt = np.clip(d * base, -lpw, lpw)
            h = np.where(tt == 0, 1.0, np.sin(np.pi * tt) / np.where(tt == 0, 1, np.pi * tt))
            h = h * np.cos(tt * np.pi / lpw / 2) ** 2 * base / orig
            y[..., j] = (sig * h).sum(-1)
        return y

    np.testing.assert_allclose(out["rs_down"], resample_np(x, 3, 2, 6, 0.99), atol=1e-12)
    np.testing.assert_allclose(out["rs_up"], resample_np(x[0], 4, 6, 4, 0.9), atol=1e-12)
    assert out["rs_down"].shape == (2, 3, 27) and out["rs_up"].shape == (3, 60)
    assert out["rs_same"] is True
    # Kaiser kernel: I0(beta sqrt(1 - (t/6)^2)) / I0(beta) window at the same positions
    width = out["kaiser_width"]
    assert width == math.ceil(6 * 3 / 1.98)
    t = (np.arange(0, -2, -1)[:, None] / 2 + np.arange(-width, width + 3)[None] / 3) * 1.98
    t = np.clip(t, -6, 6)
    beta = float(np.float32(14.769656459379492))  # ``torch.tensor(float(beta))`` is a float32 scalar
    win = np.i0(beta * np.sqrt(1 - (t / 6) ** 2)) / np.i0(beta)
    sinc = np.where(t == 0, 1.0, np.sin(np.pi * t) / np.where(t == 0, 1, np.pi * t))
    # (``torch.i0(beta_tensor)`` of that float32 scalar is itself a float32 value: ~1e-7 apart)
    np.testing.assert_allclose(out["kaiser_kernel"][:, 0], sinc * win * 1.98 / 3, rtol=1e-6, atol=1e-15)


def test_torchaudio_lfilter_biquads_gain():
    out = _page(ta_page)
    x, sr, tone = _audio_data()
    np.testing.assert_allclose(out["gain"], x * 10 ** (6 / 20), rtol=1e-12)
    assert out["gain0"] is True
    a_c, b_c = np.array([1.2, -0.5, 0.25]), np.array([0.2, 0.3, 0.1])
    np.testing.assert_allclose(out["lfilter"], _lfilter_np(x, a_c, b_c), atol=1e-12)
    np.testing.assert_allclose(out["lfilter_clamped"], np.clip(_lfilter_np(4 * x, a_c, b_c), -1, 1), atol=1e-12)
    assert np.abs(_lfilter_np(4 * x, a_c, b_c)).max() > 1  # the clamp did something
    banks = [(a_c, b_c), (np.array([1.0, 0.3, 0.0]), np.array([0.5, 0.0, -0.5])), (2 * a_c, b_c)]
    for i, (aa, bb) in enumerate(banks):
        np.testing.assert_allclose(out["lfilter_bank"][:, i], _lfilter_np(x[:, i], aa, bb), atol=1e-12)
        np.testing.assert_allclose(out["lfilter_nobatch"][i], _lfilter_np(x[0, 0], aa, bb), atol=1e-12)
    # RBJ cookbook biquads: unit gain at DC for the low-pass, none for the high-pass
    assert abs(out["lowpass_step"][0, -1] - 0.5) < 1e-6 and abs(out["highpass_step"][0, -1]) < 1e-6
    w0 = 2 * math.pi * 1500 / sr
    al = math.sin(w0) / 2 / 0.9
    bl = np.array([(1 - math.cos(w0)) / 2, 1 - math.cos(w0), (1 - math.cos(w0)) / 2])
    alc = np.array([1 + al, -2 * math.cos(w0), 1 - al])
    np.testing.assert_allclose(out["lowpass_x"], np.clip(_lfilter_np(x, alc, bl), -1, 1), atol=1e-12)


def test_torchaudio_float64_gradients_by_finite_differences():
    a = ta_functional(lucid)
    x_np, sr, _ = _audio_data()
    x = lucid.tensor(x_np[0, :2, :24].copy(), requires_grad=True)
    win = lucid.hann_window(16, dtype=lucid.float64)
    fb = a.melscale_fbanks(9, 0.0, 4000.0, 4, sr).to(lucid.float64)
    wts = lucid.tensor(np.random.default_rng(1).standard_normal((2, 4, 7)))

    def f(inp):
        spec = a.spectrogram(inp, 0, win, 16, 4, 16, 2.0, "window")  # (2, 9, 7)
        mel = (spec.transpose(-1, -2) @ fb).transpose(-1, -2)  # (2, 4, 7)
        return (a.amplitude_to_DB(mel, 10.0, 1e-10, 0.0, top_db=80.0) * wts).sum()

    f(x).backward()
    g = _np(x.grad)
    # lfilter's Python loop writes into views of its own intermediates (``o0 -= ...`` on the rows of
    # ``input_signal_windows.permute(2, 0, 1)``): PyTorch refuses that under autograd ("Output 0 of Unbind
    # is a view and is being modified inplace"; torchaudio later wrapped lfilter in an autograd.Function),
    # Lucid differentiates it; a Lucid-only check of the waveform's gradient against finite differences
    cutoff = lucid.tensor(900.0, dtype=lucid.float64)
    xs = lucid.tensor(x_np[1, :, :20].copy(), requires_grad=True)

    def h(inp, c):
        return (a.lowpass_biquad(inp, sr, c, Q=0.8) * lucid.arange(20.0, dtype=lucid.float64)).sum()

    h(xs, cutoff).backward()
    eps = 1e-6
    with lucid.no_grad():
        for idx in ((0, 3), (1, 11), (0, 20)):
            xp_, xm_ = x.detach().clone(), x.detach().clone()
            xp_[idx] += eps
            xm_[idx] -= eps
            fd = (f(xp_).item() - f(xm_).item()) / (2 * eps)
            assert abs(g[idx] - fd) < 1e-5 * (1 + abs(fd)), (idx, g[idx], fd)
            assert abs(g[idx]) > 1e-3
        for idx in ((0, 2), (2, 15)):
            xp_, xm_ = xs.detach().clone(), xs.detach().clone()
            xp_[idx] += eps
            xm_[idx] -= eps
            fd = (h(xp_, cutoff).item() - h(xm_, cutoff).item()) / (2 * eps)
            assert abs(xs.grad[idx].item() - fd) < 1e-6 * (1 + abs(fd)), (idx, fd)
            assert abs(fd) > 1e-3


def test_torchaudio_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _page(ta_page), ta_page(torch)
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, (k, a[k].shape, b[k].shape)
            # the float32 filter banks: PyTorch's float32 ``linspace`` differs from NumPy's (Lucid's) by an ulp
            tol = dict(rtol=1e-5, atol=1e-6) if k.startswith("fb_") else dict(rtol=1e-6, atol=1e-9)
            np.testing.assert_allclose(a[k], b[k], err_msg=k, **tol)
        elif isinstance(a[k], float):
            assert abs(a[k] - b[k]) < 1e-6, k
        else:
            assert a[k] == b[k], k


def _top2_out_of_range_ignore(torch):
    """multiclass stat scores with ``top_k=2`` and an ``ignore_index`` outside the classes: upstream's
    ``preds[target == ignore_index] = num_classes`` indexes (N, C, 1) scores with an (N, 1) mask."""
    m = tm_classification(torch)
    logits, target, _, _ = _cls_data()
    tg = torch.tensor(target)
    tg[::5] = -100
    return m.multiclass_accuracy(torch.tensor(logits), tg, 4, average="none", top_k=2, ignore_index=-100)


def test_setitem_index_errors_name_the_op_and_shapes():
    with pytest.raises(IndexError, match=r"^setitem: boolean index did not match indexed array along axis 1; .*"
                                         r"\(tensor shape \(24, 4, 1\), index tensor shapes \[\(24, 1\)\], "
                                         r"value shape \(\)\)$"):
        _top2_out_of_range_ignore(lucid)
    x = lucid.zeros(3)
    with pytest.raises(IndexError, match=r"^setitem: index 7 is out of bounds for axis 0 with size 3 "
                                         r"\(tensor shape \(3,\), index tensor shapes \[\(1,\)\], value shape \(1,\)\)"):
        x[lucid.tensor([7])] = lucid.ones(1)
    with pytest.raises(IndexError, match=r"^setitem: boolean index did not match .* value shape \(1,\)\)$"):
        x[lucid.tensor([True, False])] = lucid.ones(1)  # (found while reshaping the value: same message)
    with pytest.raises(IndexError, match=r"^setitem: index 5 is out of bounds"):
        x[5] = 1.0
    assert x.tolist() == [0.0, 0.0, 0.0]  # nothing written


def test_setitem_index_errors_torch_parity():
    torch = pytest.importorskip("torch")
    with pytest.raises(IndexError, match="The shape of the mask"):
        _top2_out_of_range_ignore(torch)


# ================================================================ torchaudio: more of functional.py and filtering.py
def ta_more(torch):
    a = ta_functional(torch)
    biquad, lfilter, resample = a.biquad, a.lfilter, a.resample

    def phase_vocoder(complex_specgrams, rate, phase_advance):
        if rate == 1.0:
            return complex_specgrams

        # pack batch
        shape = complex_specgrams.size()
        complex_specgrams = complex_specgrams.reshape([-1] + list(shape[-2:]))

        # Figures out the corresponding real dtype, i.e. complex128 -> float64, complex64 -> float32
        # Note torch.real is a view so it does not incur any memory copy.
        real_dtype = torch.real(complex_specgrams).dtype
        time_steps = torch.arange(0, complex_specgrams.size(-1), rate, device=complex_specgrams.device,
                                  dtype=real_dtype)

        alphas = time_steps % 1.0
        phase_0 = complex_specgrams[..., :1].angle()

        # Time Padding
        complex_specgrams = torch.nn.functional.pad(complex_specgrams, [0, 2])

        # (new_bins, freq, 2)
        complex_specgrams_0 = complex_specgrams.index_select(-1, time_steps.long())
        complex_specgrams_1 = complex_specgrams.index_select(-1, (time_steps + 1).long())

        angle_0 = complex_specgrams_0.angle()
        angle_1 = complex_specgrams_1.angle()

        norm_0 = complex_specgrams_0.abs()
        norm_1 = complex_specgrams_1.abs()

        phase = angle_1 - angle_0 - phase_advance
        phase = phase - 2 * math.pi * torch.round(phase / (2 * math.pi))

        # Compute Phase Accum
        phase = phase + phase_advance
        phase = torch.cat([phase_0, phase[..., :-1]], dim=-1)
        phase_acc = torch.cumsum(phase, -1)

        mag = alphas * norm_1 + (1 - alphas) * norm_0

        complex_specgrams_stretch = torch.polar(mag, phase_acc)

        # unpack batch
        complex_specgrams_stretch = complex_specgrams_stretch.reshape(shape[:-2] + complex_specgrams_stretch.shape[1:])
        return complex_specgrams_stretch

    def sliding_window_cmn(specgram, cmn_window=600, min_cmn_window=100, center=False, norm_vars=False):
        input_shape = specgram.shape
        num_frames, num_feats = input_shape[-2:]
        specgram = specgram.view(-1, num_frames, num_feats)
        num_channels = specgram.shape[0]

        dtype = specgram.dtype
        device = specgram.device
        last_window_start = last_window_end = -1
        cur_sum = torch.zeros(num_channels, num_feats, dtype=dtype, device=device)
        cur_sumsq = torch.zeros(num_channels, num_feats, dtype=dtype, device=device)
        cmn_specgram = torch.zeros(num_channels, num_frames, num_feats, dtype=dtype, device=device)
        for t in range(num_frames):
            window_start = 0
            window_end = 0
            if center:
                window_start = t - cmn_window // 2
                window_end = window_start + cmn_window
            else:
                window_start = t - cmn_window
                window_end = t + 1
            if window_start < 0:
                window_end -= window_start
                window_start = 0
            if not center:
                if window_end > t:
                    window_end = max(t + 1, min_cmn_window)
            if window_end > num_frames:
                window_start -= window_end - num_frames
                window_end = num_frames
                if window_start < 0:
                    window_start = 0
            if last_window_start == -1:
                input_part = specgram[:, window_start: window_end - window_start, :]
                cur_sum += torch.sum(input_part, 1)
                if norm_vars:
                    cur_sumsq += torch.cumsum(input_part**2, 1)[:, -1, :]
            else:
                if window_start > last_window_start:
                    frame_to_remove = specgram[:, last_window_start, :]
                    cur_sum -= frame_to_remove
                    if norm_vars:
                        cur_sumsq -= frame_to_remove**2
                if window_end > last_window_end:
                    frame_to_add = specgram[:, last_window_end, :]
                    cur_sum += frame_to_add
                    if norm_vars:
                        cur_sumsq += frame_to_add**2
            window_frames = window_end - window_start
            last_window_start = window_start
            last_window_end = window_end
            cmn_specgram[:, t, :] = specgram[:, t, :] - cur_sum / window_frames
            if norm_vars:
                if window_frames == 1:
                    cmn_specgram[:, t, :] = torch.zeros(num_channels, num_feats, dtype=dtype, device=device)
                else:
                    variance = cur_sumsq
                    variance = variance / window_frames
                    variance -= (cur_sum**2) / (window_frames**2)
                    variance = torch.pow(variance, -0.5)
                    cmn_specgram[:, t, :] *= variance

        cmn_specgram = cmn_specgram.view(input_shape[:-2] + (num_frames, num_feats))
        if len(input_shape) == 2:
            cmn_specgram = cmn_specgram.squeeze(0)
        return cmn_specgram

    def psd(specgram, mask=None, normalize=True, eps=1e-10):
        specgram = specgram.transpose(-3, -2)  # shape (freq, channel, time)
        # outer product:
        # (..., ch_1, time) x (..., ch_2, time) -> (..., time, ch_1, ch_2)
        psd = torch.einsum("...ct,...et->...tce", [specgram, specgram.conj()])

        if mask is not None:
            if mask.shape[:-1] != specgram.shape[:-2] or mask.shape[-1] != specgram.shape[-1]:
                raise ValueError(
                    "The dimensions of mask except the channel dimension should be the same as specgram."
                    f"Found {mask.shape} for mask and {specgram.shape} for specgram."
                )
            # Normalized mask along time dimension:
            if normalize:
                mask = mask / (mask.sum(dim=-1, keepdim=True) + eps)

            psd = psd * mask[..., None, None]

        psd = psd.sum(dim=-3)
        return psd

    def _compute_mat_trace(input, dim1=-1, dim2=-2):
        if input.ndim < 2:
            raise ValueError("The dimension of the tensor must be at least 2.")
        if input.shape[dim1] != input.shape[dim2]:
            raise ValueError("The size of ``dim1`` and ``dim2`` must be the same.")
        input = torch.diagonal(input, 0, dim1=dim1, dim2=dim2)
        return input.sum(dim=-1)

    def _tik_reg(mat, reg=1e-7, eps=1e-8):
        # Add eps
        C = mat.size(-1)
        eye = torch.eye(C, dtype=mat.dtype, device=mat.device)
        epsilon = _compute_mat_trace(mat).real[..., None, None] * reg
        # in case that correlation_matrix is all-zero
        epsilon = epsilon + eps
        mat = mat + epsilon * eye[..., :, :]
        return mat

    def mvdr_weights_souden(psd_s, psd_n, reference_channel, diagonal_loading=True, diag_eps=1e-7, eps=1e-8):
        if diagonal_loading:
            psd_n = _tik_reg(psd_n, reg=diag_eps)
        numerator = torch.linalg.solve(psd_n, psd_s)  # psd_n.inv() @ psd_s
        # ws: (..., C, C) / (...,) -> (..., C, C)
        ws = numerator / (_compute_mat_trace(numerator)[..., None, None] + eps)
        if isinstance(reference_channel, int):
            beamform_weights = ws[..., :, reference_channel]
        elif isinstance(reference_channel, torch.Tensor):
            reference_channel = reference_channel.to(psd_n.dtype)
            # h: (..., F, C_1, C_2) x (..., C_2) -> (..., F, C_1)
            beamform_weights = torch.einsum("...c,...c->...", [ws, reference_channel[..., None, None, :]])
        else:
            raise TypeError(f'Expected "int" or "Tensor" for reference_channel. Found: {type(reference_channel)}.')

        return beamform_weights

    def mvdr_weights_rtf(rtf, psd_n, reference_channel=None, diagonal_loading=True, diag_eps=1e-7, eps=1e-8):
        if diagonal_loading:
            psd_n = _tik_reg(psd_n, reg=diag_eps)
        # numerator = psd_n.inv() @ stv
        numerator = torch.linalg.solve(psd_n, rtf.unsqueeze(-1)).squeeze(-1)  # (..., freq, channel)
        # denominator = stv^H @ psd_n.inv() @ stv
        denominator = torch.einsum("...d,...d->...", [rtf.conj(), numerator])
        beamform_weights = numerator / (denominator.real.unsqueeze(-1) + eps)
        # normalize the numerator
        if reference_channel is not None:
            if isinstance(reference_channel, int):
                scale = rtf[..., reference_channel].conj()
            elif isinstance(reference_channel, torch.Tensor):
                reference_channel = reference_channel.to(psd_n.dtype)
                scale = torch.einsum("...c,...c->...", [rtf.conj(), reference_channel[..., None, :]])
            else:
                raise TypeError(f'Expected "int" or "Tensor" for reference_channel. Found: {type(reference_channel)}.')

            beamform_weights = beamform_weights * scale[..., None]

        return beamform_weights

    def rtf_evd(psd_s):
        if not psd_s.is_complex():
            raise TypeError(f"The type of psd_s must be ``torch.cfloat`` or ``torch.cdouble``. Found {psd_s.dtype}.")
        if psd_s.shape[-1] != psd_s.shape[-2]:
            raise ValueError(f"The last two dimensions of psd_s should be the same. Found {psd_s.shape}.")
        _, v = torch.linalg.eigh(psd_s)  # v is sorted along with eigenvalues in ascending order
        rtf = v[..., -1]  # choose the eigenvector with max eigenvalue
        return rtf

    def rtf_power(psd_s, psd_n, reference_channel, n_iter=3, diagonal_loading=True, diag_eps=1e-7):
        if n_iter <= 0:
            raise ValueError("The number of iteration must be greater than 0.")

        # Apply diagonal loading to psd_n to improve robustness.
        if diagonal_loading:
            psd_n = _tik_reg(psd_n, reg=diag_eps)
        # phi is regarded as the first iteration
        phi = torch.linalg.solve(psd_n, psd_s)  # psd_n.inv() @ psd_s
        if isinstance(reference_channel, int):
            rtf = phi[..., reference_channel]
        elif isinstance(reference_channel, torch.Tensor):
            reference_channel = reference_channel.to(psd_n.dtype)
            rtf = torch.einsum("...c,...c->...", [phi, reference_channel[..., None, None, :]])
        else:
            raise TypeError(f'Expected "int" or "Tensor" for reference_channel. Found: {type(reference_channel)}.')
        rtf = rtf.unsqueeze(-1)  # (..., freq, channel, 1)
        if n_iter >= 2:
            # The number of iterations in the for loop is `n_iter - 2`
            # because the `phi` above and `torch.matmul(psd_s, rtf)` are regarded as
            # two iterations.
            for _ in range(n_iter - 2):
                rtf = torch.matmul(phi, rtf)
            rtf = torch.matmul(psd_s, rtf)
        else:
            # if there is only one iteration, the rtf is the psd_s[..., referenc_channel]
            # which is psd_n @ phi @ ref_channel
            rtf = torch.matmul(psd_n, rtf)
        return rtf.squeeze(-1)

    def apply_beamforming(beamform_weights, specgram):
        if beamform_weights.shape[:-2] != specgram.shape[:-3]:
            raise ValueError("The dimensions except the last two dimensions of beamform_weights should be the same "
                             "as the dimensions except the last three dimensions of specgram.")

        if not (beamform_weights.is_complex() and specgram.is_complex()):
            raise TypeError("The type of beamform_weights and specgram must be ``torch.cfloat`` or ``torch.cdouble``.")

        # (..., freq, channel) x (..., channel, freq, time) -> (..., freq, time)
        specgram_enhanced = torch.einsum("...fc,...cft->...ft", [beamform_weights.conj(), specgram])
        return specgram_enhanced

    def _apply_convolve_mode(conv_result, x_length, y_length, mode):
        valid_convolve_modes = ["full", "valid", "same"]
        if mode == "full":
            return conv_result
        elif mode == "valid":
            target_length = max(x_length, y_length) - min(x_length, y_length) + 1
            start_idx = (conv_result.size(-1) - target_length) // 2
            return conv_result[..., start_idx: start_idx + target_length]
        elif mode == "same":
            start_idx = (conv_result.size(-1) - x_length) // 2
            return conv_result[..., start_idx: start_idx + x_length]
        else:
            raise ValueError(f"Unrecognized mode value '{mode}'. Please specify one of {valid_convolve_modes}.")

    def fftconvolve(x, y, mode="full"):
        n = x.size(-1) + y.size(-1) - 1
        fresult = torch.fft.rfft(x, n=n) * torch.fft.rfft(y, n=n)
        result = torch.fft.irfft(fresult, n=n)
        return _apply_convolve_mode(result, x.size(-1), y.size(-1), mode)

    def convolve(x, y, mode="full"):
        x_size, y_size = x.size(-1), y.size(-1)

        if x.size(-1) < y.size(-1):
            x, y = y, x

        if x.shape[:-1] != y.shape[:-1]:
            new_shape = [max(i, j) for i, j in zip(x.shape[:-1], y.shape[:-1])]
            x = x.broadcast_to(new_shape + [x.shape[-1]])
            y = y.broadcast_to(new_shape + [y.shape[-1]])

        num_signals = torch.tensor(x.shape[:-1]).prod()
        reshaped_x = x.reshape((int(num_signals), x.size(-1)))
        reshaped_y = y.reshape((int(num_signals), y.size(-1)))
        output = torch.nn.functional.conv1d(
            input=reshaped_x,
            weight=reshaped_y.flip(-1).unsqueeze(1),
            stride=1,
            groups=reshaped_x.size(0),
            padding=reshaped_y.size(-1) - 1,
        )
        output_shape = x.shape[:-1] + (-1,)
        result = output.reshape(output_shape)
        return _apply_convolve_mode(result, x_size, y_size, mode)

    def add_noise(waveform, noise, snr, lengths=None):
        if not (waveform.ndim - 1 == noise.ndim - 1 == snr.ndim and (lengths is None or lengths.ndim == snr.ndim)):
            raise ValueError("Input leading dimensions don't match.")

        L = waveform.size(-1)

        if L != noise.size(-1):
            raise ValueError(f"Length dimensions of waveform and noise don't match (got {L} and {noise.size(-1)}).")

        # compute scale
        if lengths is not None:
            mask = torch.arange(0, L, device=lengths.device).expand(waveform.shape) < lengths.unsqueeze(
                -1
            )  # (*, L) < (*, 1) = (*, L)
            masked_waveform = waveform * mask
            masked_noise = noise * mask
        else:
            masked_waveform = waveform
            masked_noise = noise

        energy_signal = torch.linalg.vector_norm(masked_waveform, ord=2, dim=-1) ** 2  # (*,)
        energy_noise = torch.linalg.vector_norm(masked_noise, ord=2, dim=-1) ** 2  # (*,)
        original_snr_db = 10 * (torch.log10(energy_signal) - torch.log10(energy_noise))
        scale = 10 ** ((original_snr_db - snr) / 20.0)  # (*,)

        # scale noise
        scaled_noise = scale.unsqueeze(-1) * noise  # (*, 1) * (*, L) = (*, L)

        return waveform + scaled_noise  # (*, L)

    def speed(waveform, orig_freq, factor, lengths=None):
        source_sample_rate = int(factor * orig_freq)
        target_sample_rate = int(orig_freq)

        gcd = math.gcd(source_sample_rate, target_sample_rate)
        source_sample_rate = source_sample_rate // gcd
        target_sample_rate = target_sample_rate // gcd

        if lengths is None:
            out_lengths = None
        else:
            out_lengths = torch.ceil(lengths * target_sample_rate / source_sample_rate).to(lengths.dtype)

        return resample(waveform, source_sample_rate, target_sample_rate), out_lengths

    def preemphasis(waveform, coeff=0.97):
        waveform = waveform.clone()
        waveform[..., 1:] -= coeff * waveform[..., :-1]
        return waveform

    def deemphasis(waveform, coeff=0.97):
        a_coeffs = torch.tensor([1.0, -coeff], dtype=waveform.dtype, device=waveform.device)
        b_coeffs = torch.tensor([1.0, 0.0], dtype=waveform.dtype, device=waveform.device)
        return lfilter(waveform, a_coeffs=a_coeffs, b_coeffs=b_coeffs)

    # ---- filtering.py
    def _dB2Linear(x):
        return math.exp(x * math.log(10) / 20.0)

    def _generate_wave_table(wave_type, data_type, table_size, min, max, phase, device):
        phase_offset = int(phase / math.pi / 2 * table_size + 0.5)

        t = torch.arange(table_size, device=device, dtype=torch.int32)

        point = (t + phase_offset) % table_size

        d = torch.zeros_like(point, device=device, dtype=torch.float64)

        if wave_type == "SINE":
            d = (torch.sin(point.to(torch.float64) / table_size * 2 * math.pi) + 1) / 2
        elif wave_type == "TRIANGLE":
            d = point.to(torch.float64) * 2 / table_size
            value = torch.div(4 * point, table_size, rounding_mode="floor")
            d[value == 0] = d[value == 0] + 0.5
            d[value == 1] = 1.5 - d[value == 1]
            d[value == 2] = 1.5 - d[value == 2]
            d[value == 3] = d[value == 3] - 1.5

        d = d * (max - min) + min

        if data_type == "INT":
            mask = d < 0
            d[mask] = d[mask] - 0.5
            d[~mask] = d[~mask] + 0.5
            d = d.to(torch.int32)
        elif data_type == "FLOAT":
            d = d.to(torch.float32)

        return d

    def allpass_biquad(waveform, sample_rate, central_freq, Q=0.707):
        dtype = waveform.dtype
        device = waveform.device
        central_freq = torch.as_tensor(central_freq, dtype=dtype, device=device)
        Q = torch.as_tensor(Q, dtype=dtype, device=device)

        w0 = 2 * math.pi * central_freq / sample_rate

        alpha = torch.sin(w0) / 2 / Q

        b0 = 1 - alpha
        b1 = -2 * torch.cos(w0)
        b2 = 1 + alpha
        a0 = 1 + alpha
        a1 = -2 * torch.cos(w0)
        a2 = 1 - alpha
        return biquad(waveform, b0, b1, b2, a0, a1, a2)

    def band_biquad(waveform, sample_rate, central_freq, Q=0.707, noise=False):
        dtype = waveform.dtype
        device = waveform.device
        central_freq = torch.as_tensor(central_freq, dtype=dtype, device=device)
        Q = torch.as_tensor(Q, dtype=dtype, device=device)

        w0 = 2 * math.pi * central_freq / sample_rate
        bw_Hz = central_freq / Q

        a0 = 1.0
        a2 = torch.exp(-2 * math.pi * bw_Hz / sample_rate)
        a1 = -4 * a2 / (1 + a2) * torch.cos(w0)

        b0 = torch.sqrt(1 - a1 * a1 / (4 * a2)) * (1 - a2)

        if noise:
            mult = torch.sqrt(((1 + a2) * (1 + a2) - a1 * a1) * (1 - a2) / (1 + a2)) / b0
            b0 = mult * b0

        b1 = 0.0
        b2 = 0.0

        return biquad(waveform, b0, b1, b2, a0, a1, a2)

    def bandpass_biquad(waveform, sample_rate, central_freq, Q=0.707, const_skirt_gain=False):
        dtype = waveform.dtype
        device = waveform.device
        central_freq = torch.as_tensor(central_freq, dtype=dtype, device=device)
        Q = torch.as_tensor(Q, dtype=dtype, device=device)

        w0 = 2 * math.pi * central_freq / sample_rate
        alpha = torch.sin(w0) / 2 / Q

        temp = torch.sin(w0) / 2 if const_skirt_gain else alpha
        b0 = temp
        b1 = 0.0
        b2 = -temp
        a0 = 1 + alpha
        a1 = -2 * torch.cos(w0)
        a2 = 1 - alpha
        return biquad(waveform, b0, b1, b2, a0, a1, a2)

    def bass_biquad(waveform, sample_rate, gain, central_freq=100, Q=0.707):
        dtype = waveform.dtype
        device = waveform.device
        central_freq = torch.as_tensor(central_freq, dtype=dtype, device=device)
        Q = torch.as_tensor(Q, dtype=dtype, device=device)
        gain = torch.as_tensor(gain, dtype=dtype, device=device)

        w0 = 2 * math.pi * central_freq / sample_rate
        alpha = torch.sin(w0) / 2 / Q
        A = torch.exp(gain / 40 * math.log(10))

        temp1 = 2 * torch.sqrt(A) * alpha
        temp2 = (A - 1) * torch.cos(w0)
        temp3 = (A + 1) * torch.cos(w0)

        b0 = A * ((A + 1) - temp2 + temp1)
        b1 = 2 * A * ((A - 1) - temp3)
        b2 = A * ((A + 1) - temp2 - temp1)
        a0 = (A + 1) + temp2 + temp1
        a1 = -2 * ((A - 1) + temp3)
        a2 = (A + 1) + temp2 - temp1

        return biquad(waveform, b0 / a0, b1 / a0, b2 / a0, a0 / a0, a1 / a0, a2 / a0)

    def contrast(waveform, enhancement_amount=75.0):
        if not 0 <= enhancement_amount <= 100:
            raise ValueError("Allowed range of values for enhancement_amount : 0-100")

        contrast = enhancement_amount / 750.0

        temp1 = waveform * (math.pi / 2)
        temp2 = contrast * torch.sin(temp1 * 4)
        output_waveform = torch.sin(temp1 + temp2)

        return output_waveform

    def dcshift(waveform, shift, limiter_gain=None):
        output_waveform = waveform
        limiter_threshold = 0.0

        if limiter_gain is not None:
            limiter_threshold = 1.0 - (abs(shift) - limiter_gain)

        # Note:
        # the following index-based update breaks auto-grad support
        if limiter_gain is not None and shift > 0:
            mask = waveform > limiter_threshold
            temp = (waveform[mask] - limiter_threshold) * limiter_gain / (1 - limiter_threshold)
            output_waveform[mask] = (temp + limiter_threshold + shift).clamp(max=limiter_threshold)
            output_waveform[~mask] = (waveform[~mask] + shift).clamp(min=-1, max=1)
        elif limiter_gain is not None and shift < 0:
            mask = waveform < -limiter_threshold
            temp = (waveform[mask] + limiter_threshold) * limiter_gain / (1 - limiter_threshold)
            output_waveform[mask] = (temp - limiter_threshold + shift).clamp(min=-limiter_threshold)
            output_waveform[~mask] = (waveform[~mask] + shift).clamp(min=-1, max=1)
        else:
            output_waveform = (waveform + shift).clamp(min=-1, max=1)

        return output_waveform

    def _overdrive_core_loop_generic(waveform, temp, last_in, last_out, output_waveform):
        for i in range(waveform.shape[-1]):
            last_out = temp[:, i] - last_in + 0.995 * last_out
            last_in = temp[:, i]
            output_waveform[:, i] = waveform[:, i] * 0.5 + last_out * 0.75

    def overdrive(waveform, gain=20, colour=20):
        actual_shape = waveform.shape
        device, dtype = waveform.device, waveform.dtype

        # convert to 2D (..,time)
        waveform = waveform.view(-1, actual_shape[-1])

        gain = _dB2Linear(gain)
        colour = colour / 200
        last_in = torch.zeros(waveform.shape[:-1], dtype=dtype, device=device)
        last_out = torch.zeros(waveform.shape[:-1], dtype=dtype, device=device)

        temp = waveform * gain + colour

        mask1 = temp < -1
        temp[mask1] = torch.tensor(-2.0 / 3.0, dtype=dtype, device=device)
        # Wrapping the constant with Tensor is required for Torchscript

        mask2 = temp > 1
        temp[mask2] = torch.tensor(2.0 / 3.0, dtype=dtype, device=device)

        mask3 = ~mask1 & ~mask2
        temp[mask3] = temp[mask3] - (temp[mask3] ** 3) * (1.0 / 3)

        output_waveform = torch.zeros_like(waveform, dtype=dtype, device=device)

        _overdrive_core_loop_generic(waveform, temp, last_in, last_out, output_waveform)

        return output_waveform.clamp(min=-1, max=1).view(actual_shape)

    def phaser(waveform, sample_rate, gain_in=0.4, gain_out=0.74, delay_ms=3.0, decay=0.4, mod_speed=0.5,
               sinusoidal=True):
        actual_shape = waveform.shape
        device, dtype = waveform.device, waveform.dtype

        # convert to 2D (channels,time)
        waveform = waveform.view(-1, actual_shape[-1])

        delay_buf_len = int((delay_ms * 0.001 * sample_rate) + 0.5)
        delay_buf = torch.zeros(waveform.shape[0], delay_buf_len, dtype=dtype, device=device)

        mod_buf_len = int(sample_rate / mod_speed + 0.5)

        if sinusoidal:
            wave_type = "SINE"
        else:
            wave_type = "TRIANGLE"

        mod_buf = _generate_wave_table(
            wave_type=wave_type,
            data_type="INT",
            table_size=mod_buf_len,
            min=1.0,
            max=float(delay_buf_len),
            phase=math.pi / 2,
            device=device,
        )

        delay_pos = 0
        mod_pos = 0

        output_waveform_pre_gain_list = []
        waveform = waveform * gain_in
        delay_buf = delay_buf * decay
        waveform_list = [waveform[:, i] for i in range(waveform.size(1))]
        delay_buf_list = [delay_buf[:, i] for i in range(delay_buf.size(1))]
        mod_buf_list = [mod_buf[i] for i in range(mod_buf.size(0))]

        for i in range(waveform.shape[-1]):
            idx = int((delay_pos + mod_buf_list[mod_pos]) % delay_buf_len)
            mod_pos = (mod_pos + 1) % mod_buf_len
            delay_pos = (delay_pos + 1) % delay_buf_len
            temp = (waveform_list[i]) + (delay_buf_list[idx])
            delay_buf_list[delay_pos] = temp * decay
            output_waveform_pre_gain_list.append(temp)

        output_waveform = torch.stack(output_waveform_pre_gain_list, dim=1).to(dtype=dtype, device=device)
        output_waveform.mul_(gain_out)

        return output_waveform.clamp(min=-1, max=1).view(actual_shape)

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v)})


def ta_more_page(torch):
    f = ta_more(torch)
    base = ta_functional(torch)
    x_np, sr, tone_np = _audio_data()
    rng = np.random.default_rng(31)
    x = torch.tensor(x_np)
    win = torch.hann_window(16, dtype=torch.float64)
    out = {}
    spec = base.spectrogram(x, 0, win, 16, 4, 16, None, False)  # (2, 3, 9, 11) complex128
    out["spec"] = _np(spec)
    adv = torch.linspace(0, math.pi * 4, 9, dtype=torch.float64)[..., None]
    out["pv"] = _np(f.phase_vocoder(spec, 1.3, adv))
    out["pv_same"] = f.phase_vocoder(spec, 1.0, adv) is spec
    feats = torch.tensor(rng.standard_normal((2, 12, 3)))
    out["feats"] = _np(feats)
    out["cmn_left"] = _np(f.sliding_window_cmn(feats, cmn_window=5, min_cmn_window=3))
    out["cmn_center_var"] = _np(f.sliding_window_cmn(feats[0], cmn_window=4, center=True, norm_vars=True))
    # beamforming: 3 channels, 9 bins, 11 frames
    sp = spec[0]
    noise_spec = base.spectrogram(torch.tensor(rng.uniform(-0.3, 0.3, (3, 40))), 0, win, 16, 4, 16, None, False)
    mask = torch.tensor(rng.uniform(0.1, 1.0, (9, 11)))
    out["psd"] = _np(f.psd(sp))
    out["psd_mask"] = _np(f.psd(sp, mask))
    psd_s, psd_n = f.psd(sp, mask), f.psd(noise_spec)
    out["psd_n"] = _np(psd_n)
    out["souden0"] = _np(f.mvdr_weights_souden(psd_s, psd_n, 0))
    out["souden_onehot"] = _np(f.mvdr_weights_souden(psd_s, psd_n, torch.tensor([0.0, 1.0, 0.0])))
    rtf = f.rtf_evd(psd_s)
    out["rtf_evd_proj"] = _np(rtf[..., :, None] * rtf[..., None, :].conj())  # the phase of an eigenvector is free
    out["rtf_power3"] = _np(f.rtf_power(psd_s, psd_n, 1, n_iter=3))
    out["rtf_power1"] = _np(f.rtf_power(psd_s, psd_n, torch.tensor([1, 0, 0]), n_iter=1))
    rtf_p = f.rtf_power(psd_s, psd_n, 1, n_iter=3)
    w_rtf = f.mvdr_weights_rtf(rtf_p, psd_n, 1)
    out["mvdr_rtf"] = _np(w_rtf)
    out["mvdr_rtf_noref"] = _np(f.mvdr_weights_rtf(rtf_p, psd_n))
    out["beam"] = _np(f.apply_beamforming(w_rtf, sp))
    # convolutions, broadcasting (2, 1, N) with (1, 3, M)
    a1, b1 = torch.tensor(rng.standard_normal((2, 1, 10))), torch.tensor(rng.standard_normal((1, 3, 4)))
    out["conv_a"], out["conv_b"] = _np(a1), _np(b1)
    for mode in ("full", "valid", "same"):
        out[f"fftconv_{mode}"] = _np(f.fftconvolve(a1, b1, mode))
        out[f"conv_{mode}"] = _np(f.convolve(a1, b1, mode))
        out[f"conv_swapped_{mode}"] = _np(f.convolve(b1, a1, mode))
    wav, noi = torch.tensor(rng.standard_normal((2, 40))), torch.tensor(rng.standard_normal((2, 40)))
    out["wav"], out["noi"] = _np(wav), _np(noi)
    out["noisy"] = _np(f.add_noise(wav, noi, torch.tensor([10.0, 3.0], dtype=torch.float64)))
    out["noisy_len"] = _np(f.add_noise(wav, noi, torch.tensor([10.0, 3.0], dtype=torch.float64), torch.tensor([40, 25])))
    sped, lens = f.speed(x, 8000, 1.5, torch.tensor([40, 33]))
    out["speed"], out["speed_len"] = _np(sped), _np(lens)
    out["pre"] = _np(f.preemphasis(x, 0.9))
    out["de_pre"] = _np(f.deemphasis(f.preemphasis(x, 0.9), 0.9))
    out["wt_sine_int"] = _np(f._generate_wave_table("SINE", "INT", 20, 1.0, 9.0, math.pi / 2, x.device))
    out["wt_tri_float"] = _np(f._generate_wave_table("TRIANGLE", "FLOAT", 20, -2.0, 3.0, 0.3, x.device))
    out["wt_tri_int"] = _np(f._generate_wave_table("TRIANGLE", "INT", 20, -2.0, 3.0, 0.0, x.device))
    out["allpass"] = _np(f.allpass_biquad(x, sr, 1200.0, 0.8))
    out["band"] = _np(f.band_biquad(x, sr, 1200.0, 1.5))
    out["band_noise"] = _np(f.band_biquad(x, sr, 1200.0, 1.5, noise=True))
    out["bandpass"] = _np(f.bandpass_biquad(x, sr, 900.0, 1.1))
    out["bandpass_csg"] = _np(f.bandpass_biquad(x, sr, 900.0, 1.1, const_skirt_gain=True))
    out["bass"] = _np(f.bass_biquad(x, sr, 6.0, 300.0))
    out["contrast"] = _np(f.contrast(x, 60.0))
    big = torch.tensor(np.linspace(-1, 1, 21))
    inp = big.clone()
    out["dc_pos"] = _np(f.dcshift(inp, 0.3, 0.05))
    out["dc_pos_input_changed"] = bool((inp != big).any().item())  # upstream writes into its input
    out["dc_neg"] = _np(f.dcshift(big.clone(), -0.4, 0.1))
    out["dc_plain"] = _np(f.dcshift(big.clone(), 0.5))
    out["overdrive"] = _np(f.overdrive(x, 12.0, 30.0))
    out["phaser"] = _np(f.phaser(x[0], 2000, mod_speed=2.0))
    out["phaser_tri"] = _np(f.phaser(x[0, :1], 2000, delay_ms=4.0, mod_speed=2.0, sinusoidal=False))
    return out


def _resample_np(sig, orig, new, lpw=6, rolloff=0.99):
    """The dense sum y[j] = sum_i x[i] h(i / orig - j / new) with the Hann-windowed sinc h."""
    g = math.gcd(orig, new)
    orig, new = orig // g, new // g
    base = min(orig, new) * rolloff
    L = sig.shape[-1]
    J = math.ceil(new * L / orig)
    y = np.zeros(sig.shape[:-1] + (J,))
    for j in range(J):
        d = np.arange(L) / orig - j / new
        tt = np.clip(d * base, -lpw, lpw)
        h = np.where(tt == 0, 1.0, np.sin(np.pi * tt) / np.where(tt == 0, 1, np.pi * tt))
        h = h * np.cos(tt * np.pi / lpw / 2) ** 2 * base / orig
        y[..., j] = (sig * h).sum(-1)
    return y


def _wave_table_np(wave_type, data_type, size, lo, hi, phase):
    off = int(phase / math.pi / 2 * size + 0.5)
    point = (np.arange(size) + off) % size
    if wave_type == "SINE":
        d = (np.sin(point / size * 2 * math.pi) + 1) / 2
    else:
        d = point * 2 / size
        q = (4 * point) // size
        d = np.select([q == 0, q == 1, q == 2, q == 3], [d + 0.5, 1.5 - d, 1.5 - d, d - 1.5])
    d = d * (hi - lo) + lo
    if data_type == "INT":
        return np.trunc(np.where(d < 0, d - 0.5, d + 0.5)).astype(np.int32)
    return d.astype(np.float32)


def test_torchaudio_phase_vocoder_cmn_beamforming():
    out = _page(ta_more_page)
    S = out["spec"]
    adv = np.linspace(0, math.pi * 4, 9)[:, None]
    ts = np.arange(0, 11, 1.3)
    Sp = np.pad(S, [(0, 0)] * 3 + [(0, 2)])
    S0, S1 = Sp[..., ts.astype(int)], Sp[..., ts.astype(int) + 1]
    ph = np.angle(S1) - np.angle(S0) - adv
    ph = ph - 2 * np.pi * np.round(ph / (2 * np.pi)) + adv
    acc = np.cumsum(np.concatenate([np.angle(S[..., :1]), ph[..., :-1]], -1), -1)
    al = ts % 1.0
    want = (al * np.abs(S1) + (1 - al) * np.abs(S0)) * np.exp(1j * acc)
    assert out["pv"].shape == (2, 3, 9, 9)  # ceil(11 / 1.3) frames
    np.testing.assert_allclose(out["pv"], want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.abs(out["pv"][..., 0]), np.abs(S[..., 0]), rtol=1e-12)  # frame 0 kept
    assert out["pv_same"] is True

    def cmn_np(x, win, minw, center, norm_vars):
        T = x.shape[-2]
        y = np.zeros_like(x)
        for t in range(T):
            if center:
                s = t - win // 2
                e = s + win
            else:
                s, e = t - win, t + 1
            if s < 0:
                e -= s
                s = 0
            if not center and e > t:
                e = max(t + 1, minw)
            if e > T:
                s, e = max(s - (e - T), 0), T
            part = x[..., s:e, :]
            y[..., t, :] = x[..., t, :] - part.mean(-2)
            if norm_vars:
                y[..., t, :] = 0 if e - s == 1 else y[..., t, :] / np.sqrt(part.var(-2))
        return y

    feats = out["feats"]
    np.testing.assert_allclose(out["cmn_left"], cmn_np(feats, 5, 3, False, False), atol=1e-12)
    np.testing.assert_allclose(out["cmn_center_var"], cmn_np(feats[0], 4, 1, True, True), atol=1e-10)
    # PSD matrices and beamformers
    sp = S[0]  # (channel, freq, time)
    rng = np.random.default_rng(31)
    rng.standard_normal((2, 12, 3))
    rng.uniform(-0.3, 0.3, (3, 40))
    m = rng.uniform(0.1, 1.0, (9, 11))
    np.testing.assert_allclose(out["psd"], np.einsum("cft,eft->fce", sp, sp.conj()), rtol=1e-10, atol=1e-14)
    mn = m / (m.sum(-1, keepdims=True) + 1e-10)
    psd_s = np.einsum("cft,eft,ft->fce", sp, sp.conj(), mn)
    np.testing.assert_allclose(out["psd_mask"], psd_s, rtol=1e-10, atol=1e-14)
    psd_n = out["psd_n"]
    assert np.allclose(psd_n, np.conj(np.swapaxes(psd_n, -1, -2)))  # Hermitian
    reg = psd_n + (np.trace(psd_n, axis1=-2, axis2=-1).real * 1e-7 + 1e-8)[:, None, None] * np.eye(3)
    num = np.linalg.solve(reg, psd_s)
    ws = num / (np.trace(num, axis1=-2, axis2=-1)[:, None, None] + 1e-8)
    np.testing.assert_allclose(out["souden0"], ws[..., 0], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(out["souden_onehot"], ws[..., 1], rtol=1e-8, atol=1e-12)
    vals, vecs = np.linalg.eigh(psd_s)
    top = vecs[..., -1]
    np.testing.assert_allclose(out["rtf_evd_proj"], top[..., :, None] * top[..., None, :].conj(), atol=1e-10)
    phi = np.linalg.solve(reg, psd_s)
    r3 = psd_s @ (phi @ phi[..., :, 1:2])
    np.testing.assert_allclose(out["rtf_power3"], r3[..., 0], rtol=1e-8, atol=1e-14)
    np.testing.assert_allclose(out["rtf_power1"], (reg @ phi[..., :, 0:1])[..., 0], rtol=1e-8, atol=1e-14)
    v = out["rtf_power3"]
    w = out["mvdr_rtf"]
    # distortionless towards the reference channel: w^H v = v[ref] q / (q + eps), q = v^H reg^-1 v (real)
    nr = np.linalg.solve(reg, v[..., None])[..., 0]
    q = np.einsum("fc,fc->f", v.conj(), nr)
    assert np.abs(q.imag).max() < 1e-12 * np.abs(q).max()
    np.testing.assert_allclose(np.einsum("fc,fc->f", w.conj(), v), v[:, 1] * q.real / (q.real + 1e-8), rtol=1e-8)
    np.testing.assert_allclose(out["mvdr_rtf_noref"], nr / (np.einsum("fc,fc->f", v.conj(), nr).real[:, None] + 1e-8),
                               rtol=1e-8)
    np.testing.assert_allclose(out["beam"], np.einsum("fc,cft->ft", w.conj(), sp), rtol=1e-10, atol=1e-14)


def test_torchaudio_convolve_noise_speed_emphasis():
    out = _page(ta_more_page)
    x, sr, _ = _audio_data()
    a1, b1 = out["conv_a"], out["conv_b"]
    full = np.stack([[np.convolve(a1[i, 0], b1[0, j]) for j in range(3)] for i in range(2)])
    np.testing.assert_allclose(out["fftconv_full"], full, atol=1e-12)
    np.testing.assert_allclose(out["conv_full"], full, atol=1e-12)
    np.testing.assert_allclose(out["conv_swapped_full"], full, atol=1e-12)
    np.testing.assert_allclose(out["fftconv_valid"], full[..., 3:10], atol=1e-12)  # 10 - 4 + 1 values
    np.testing.assert_allclose(out["conv_valid"], full[..., 3:10], atol=1e-12)
    np.testing.assert_allclose(out["conv_swapped_valid"], full[..., 3:10], atol=1e-12)
    np.testing.assert_allclose(out["fftconv_same"], full[..., 1:11], atol=1e-12)  # the first operand's length
    np.testing.assert_allclose(out["conv_same"], full[..., 1:11], atol=1e-12)
    np.testing.assert_allclose(out["conv_swapped_same"], full[..., 4:8], atol=1e-12)
    wav, noi = out["wav"], out["noi"]
    for key, L in (("noisy", 40), ("noisy_len", None)):
        added = out[key] - wav
        scale = added[:, 0] / noi[:, 0]
        np.testing.assert_allclose(added, scale[:, None] * noi, rtol=1e-10)
        lens = [40, 40] if L else [40, 25]
        snr = [10 * np.log10((wav[i, :n] ** 2).sum() / ((scale[i] * noi[i, :n]) ** 2).sum()) for i, n in enumerate(lens)]
        np.testing.assert_allclose(snr, [10.0, 3.0], rtol=1e-10)
    np.testing.assert_allclose(out["speed"], _resample_np(x, 3, 2), atol=1e-12)  # 12000 -> 8000 Hz
    np.testing.assert_array_equal(out["speed_len"], [27, 22])  # ceil(l * 2 / 3)
    assert out["speed_len"].dtype == np.int64
    pre = x.copy()
    pre[..., 1:] -= 0.9 * x[..., :-1]
    np.testing.assert_allclose(out["pre"], pre, atol=1e-15)
    np.testing.assert_allclose(out["de_pre"], x, atol=1e-12)  # deemphasis inverts it (lfilter 1 / (1 - 0.9 z^-1))


def test_torchaudio_biquads_effects_wave_tables():
    out = _page(ta_more_page)
    x, sr, _ = _audio_data()
    np.testing.assert_array_equal(out["wt_sine_int"], _wave_table_np("SINE", "INT", 20, 1.0, 9.0, math.pi / 2))
    assert out["wt_sine_int"].dtype == np.int32 and out["wt_sine_int"].max() == 9 and out["wt_sine_int"].min() == 1
    np.testing.assert_allclose(out["wt_tri_float"], _wave_table_np("TRIANGLE", "FLOAT", 20, -2.0, 3.0, 0.3), rtol=1e-6)
    np.testing.assert_array_equal(out["wt_tri_int"], _wave_table_np("TRIANGLE", "INT", 20, -2.0, 3.0, 0.0))

    def filt(a, b):
        return np.clip(_lfilter_np(x, np.asarray(a, float), np.asarray(b, float)), -1, 1)

    w0 = 2 * math.pi * 1200 / sr
    al = math.sin(w0) / 2 / 0.8
    np.testing.assert_allclose(out["allpass"], filt([1 + al, -2 * math.cos(w0), 1 - al],
                                                    [1 - al, -2 * math.cos(w0), 1 + al]), atol=1e-12)
    a2 = math.exp(-2 * math.pi * (1200 / 1.5) / sr)
    a1 = -4 * a2 / (1 + a2) * math.cos(w0)
    b0 = math.sqrt(1 - a1 * a1 / (4 * a2)) * (1 - a2)
    np.testing.assert_allclose(out["band"], filt([1, a1, a2], [b0, 0, 0]), atol=1e-12)
    b0n = math.sqrt(((1 + a2) ** 2 - a1 * a1) * (1 - a2) / (1 + a2))
    np.testing.assert_allclose(out["band_noise"], filt([1, a1, a2], [b0n, 0, 0]), atol=1e-12)
    w1 = 2 * math.pi * 900 / sr
    al1 = math.sin(w1) / 2 / 1.1
    for key, g in (("bandpass", al1), ("bandpass_csg", math.sin(w1) / 2)):
        np.testing.assert_allclose(out[key], filt([1 + al1, -2 * math.cos(w1), 1 - al1], [g, 0, -g]), atol=1e-12)
    w2 = 2 * math.pi * 300 / sr
    A = 10 ** (6 / 40)
    al2 = math.sin(w2) / 2 / 0.707
    t1, t2, t3 = 2 * math.sqrt(A) * al2, (A - 1) * math.cos(w2), (A + 1) * math.cos(w2)
    bb = [A * ((A + 1) - t2 + t1), 2 * A * ((A - 1) - t3), A * ((A + 1) - t2 - t1)]
    ab = [(A + 1) + t2 + t1, -2 * ((A - 1) + t3), (A + 1) + t2 - t1]
    np.testing.assert_allclose(out["bass"], filt(ab, bb), atol=1e-12)
    assert abs(sum(bb) / sum(ab) - A * A) < 1e-9  # shelf: +6 dB (amplitude A^2) at DC
    np.testing.assert_allclose(out["contrast"], np.sin(x * np.pi / 2 + 0.08 * np.sin(x * 2 * np.pi)), atol=1e-15)
    big = np.linspace(-1, 1, 21)
    thr = 1 - (0.3 - 0.05)
    want = np.where(big > thr, np.minimum((big - thr) * 0.05 / (1 - thr) + thr + 0.3, thr), np.clip(big + 0.3, -1, 1))
    np.testing.assert_allclose(out["dc_pos"], want, atol=1e-15)
    assert out["dc_pos_input_changed"] is True
    thr = 1 - (0.4 - 0.1)
    want = np.where(big < -thr, np.maximum((big + thr) * 0.1 / (1 - thr) - thr - 0.4, -thr), np.clip(big - 0.4, -1, 1))
    np.testing.assert_allclose(out["dc_neg"], want, atol=1e-15)
    np.testing.assert_allclose(out["dc_plain"], np.clip(big + 0.5, -1, 1), atol=1e-15)
    # overdrive: soft clipper then a one-pole DC blocker
    wv = x.reshape(-1, 40)
    temp = wv * 10 ** (12 / 20) + 30 / 200
    temp = np.where(temp < -1, -2 / 3, np.where(temp > 1, 2 / 3, temp - temp ** 3 / 3))
    y = np.zeros_like(wv)
    last_in = last_out = np.zeros(wv.shape[0])
    for i in range(40):
        last_out = temp[:, i] - last_in + 0.995 * last_out
        last_in = temp[:, i]
        y[:, i] = wv[:, i] * 0.5 + last_out * 0.75
    np.testing.assert_allclose(out["overdrive"], np.clip(y, -1, 1).reshape(x.shape), atol=1e-12)

    def phaser_np(wv, rate, delay_ms, mod_speed, sine):
        dlen = int(delay_ms * 0.001 * rate + 0.5)
        mlen = int(rate / mod_speed + 0.5)
        mod = _wave_table_np("SINE" if sine else "TRIANGLE", "INT", mlen, 1.0, float(dlen), math.pi / 2)
        buf = [np.zeros(wv.shape[0]) for _ in range(dlen)]
        wv = wv * 0.4
        dpos = mpos = 0
        outs = []
        for i in range(wv.shape[1]):
            idx = int((dpos + mod[mpos]) % dlen)
            mpos, dpos = (mpos + 1) % mlen, (dpos + 1) % dlen
            tmp = wv[:, i] + buf[idx]
            buf[dpos] = tmp * 0.4
            outs.append(tmp)
        return np.clip(np.stack(outs, 1) * 0.74, -1, 1)

    np.testing.assert_allclose(out["phaser"], phaser_np(x[0], 2000, 3.0, 2.0, True), atol=1e-12)
    np.testing.assert_allclose(out["phaser_tri"], phaser_np(x[0, :1], 2000, 4.0, 2.0, False), atol=1e-12)


def test_torchaudio_more_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _page(ta_more_page), ta_more_page(torch)
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, (k, a[k].shape, b[k].shape, a[k].dtype,
                                                                             b[k].dtype)
            np.testing.assert_allclose(a[k], b[k], rtol=1e-7, atol=1e-10, err_msg=k)
        else:
            assert a[k] == b[k], k


# ---------------------------------------------------------------- gradients through the complex pipelines
def _grad_losses(torch):
    a, m = ta_functional(torch), ta_more(torch)
    win = torch.hann_window(16, dtype=torch.float64)

    def vocoder(x):  # stft -> phase_vocoder (angle, polar, cumsum, index_select) -> istft
        s = a.spectrogram(x, 0, win, 16, 4, 16, None, False)
        adv = torch.linspace(0, math.pi * 4, 9, dtype=torch.float64)[..., None]
        y = torch.istft(m.phase_vocoder(s, 1.3, adv), 16, 4, 16, win)
        return (y * torch.arange(y.shape[-1], dtype=torch.float64)).pow(2).sum()

    def griffin(x):  # two momentum iterations from a power spectrogram
        s = a.spectrogram(x, 0, win, 16, 4, 16, 2.0, False)
        y = a.griffinlim(s, win, 16, 4, 16, 2.0, 2, 0.5, 40, False)
        return (y * torch.arange(40, dtype=torch.float64)).sum()

    def beamform(x):  # psd -> rtf_power (complex solve) -> mvdr_weights_rtf -> apply_beamforming
        s = a.spectrogram(x.reshape(2, 2, 20), 0, win, 16, 4, 16, None, False)
        ps, pn = m.psd(s[0]), m.psd(s[1])
        w = m.mvdr_weights_rtf(m.rtf_power(ps, pn, 0), pn, 0)
        return m.apply_beamforming(w, s[0]).abs().sum()

    def eigvec(x):  # complex eigh; |v|^2 does not depend on the eigenvector's free phase
        s = a.spectrogram(x.reshape(2, 2, 20), 0, win, 16, 4, 16, None, False)
        v = m.rtf_evd(m.psd(s[0]))
        return (v.abs() ** 2 * torch.arange(2, dtype=torch.float64)).sum()

    def resampled(x):
        return (a.resample(x, 3, 2) ** 3).sum() + (m.speed(x, 4, 0.5)[0] ** 2).sum()

    return dict(vocoder=vocoder, griffin=griffin, beamform=beamform, eigvec=eigvec, resampled=resampled)


def _grad_input():
    return np.random.default_rng(0).uniform(-0.5, 0.5, (2, 40))


def test_torchaudio_complex_pipeline_gradients_by_finite_differences():
    x_np = _grad_input()
    for name, f in _grad_losses(lucid).items():
        x = lucid.tensor(x_np, requires_grad=True)
        f(x).backward()
        g = _np(x.grad)
        with lucid.no_grad():
            for idx in ((0, 5), (0, 30)):  # (x[1] feeds only some of the losses)
                xp_, xm_ = x_np.copy(), x_np.copy()
                xp_[idx] += 1e-6
                xm_[idx] -= 1e-6
                fd = (f(lucid.tensor(xp_)).item() - f(lucid.tensor(xm_)).item()) / 2e-6
                assert abs(g[idx] - fd) < 1e-6 * (1 + abs(fd)), (name, idx, g[idx], fd)
                assert abs(fd) > 1e-3, (name, idx, fd)


def test_torchaudio_complex_pipeline_gradients_torch_parity():
    torch = pytest.importorskip("torch")
    x_np = _grad_input()
    la, ta = _grad_losses(lucid), _grad_losses(torch)
    for name in la:
        x1, x2 = lucid.tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
        v1, v2 = la[name](x1), ta[name](x2)
        v1.backward()
        v2.backward()
        np.testing.assert_allclose(v1.item(), v2.item(), rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(_np(x1.grad), _np(x2.grad), rtol=1e-10, atol=1e-12, err_msg=name)


# ================================================================ torchmetrics: multilabel, kappa, MCC, ranking, hinge
def tm_more(torch):
    u = tm_utils(torch)
    _cumsum, to_onehot = u._cumsum, u.to_onehot
    tensor = torch.tensor

    # ---- stat_scores.py, multilabel
    def _multilabel_stat_scores_format(preds, target, num_labels, threshold=0.5, ignore_index=None):
        if preds.is_floating_point():
            if not torch.all((preds >= 0) * (preds <= 1)):
                preds = preds.sigmoid()
            preds = preds > threshold
        preds = preds.reshape(*preds.shape[:2], -1)
        target = target.reshape(*target.shape[:2], -1)

        if ignore_index is not None:
            idx = target == ignore_index
            target = target.clone()
            target[idx] = -1

        return preds, target

    def _multilabel_stat_scores_update(preds, target, multidim_average="global"):
        sum_dim = [0, -1] if multidim_average == "global" else [-1]
        tp = ((target == preds) & (target == 1)).sum(sum_dim).squeeze()
        fn = ((target != preds) & (target == 1)).sum(sum_dim).squeeze()
        fp = ((target != preds) & (target == 0)).sum(sum_dim).squeeze()
        tn = ((target == preds) & (target == 0)).sum(sum_dim).squeeze()
        return tp, fp, tn, fn

    def _multilabel_stat_scores_compute(tp, fp, tn, fn, average="macro", multidim_average="global"):
        res = torch.stack([tp, fp, tn, fn, tp + fn], dim=-1)
        sum_dim = 0 if multidim_average == "global" else 1
        if average == "micro":
            return res.sum(sum_dim)
        elif average == "macro":
            return res.float().mean(sum_dim)
        elif average == "weighted":
            w = tp + fn
            return (res * (w / w.sum()).reshape(*w.shape, 1)).sum(sum_dim)
        elif average is None or average == "none":
            return res

    def multilabel_stat_scores(preds, target, num_labels, threshold=0.5, average="macro", multidim_average="global",
                               ignore_index=None):
        preds, target = _multilabel_stat_scores_format(preds, target, num_labels, threshold, ignore_index)
        tp, fp, tn, fn = _multilabel_stat_scores_update(preds, target, multidim_average)
        return _multilabel_stat_scores_compute(tp, fp, tn, fn, average, multidim_average)

    # ---- matthews_corrcoef.py, cohen_kappa.py (on a confusion matrix)
    def _matthews_corrcoef_compute(confmat):
        tk = confmat.sum(dim=1).float()
        pk = confmat.sum(dim=0).float()
        c = torch.trace(confmat).float()
        s = confmat.sum().float()

        cov_ytyp = c * s - sum(tk * pk)
        cov_ypyp = s**2 - sum(pk * pk)
        cov_ytyt = s**2 - sum(tk * tk)

        if cov_ypyp * cov_ytyt == 0:
            return torch.tensor(0, dtype=confmat.dtype, device=confmat.device)
        else:
            return cov_ytyp / torch.sqrt(cov_ytyt * cov_ypyp)

    def _cohen_kappa_compute(confmat, weights=None):
        confmat = confmat.float() if not confmat.is_floating_point() else confmat
        n_classes = confmat.shape[0]
        sum0 = confmat.sum(dim=0, keepdim=True)
        sum1 = confmat.sum(dim=1, keepdim=True)
        expected = sum1 @ sum0 / sum0.sum()  # outer product

        if weights is None:
            w_mat = torch.ones_like(confmat).flatten()
            w_mat[:: n_classes + 1] = 0
            w_mat = w_mat.reshape(n_classes, n_classes)
        elif weights in ("linear", "quadratic"):
            w_mat = torch.zeros_like(confmat)
            w_mat += torch.arange(n_classes, dtype=w_mat.dtype, device=w_mat.device)
            if weights == "linear":
                w_mat = torch.abs(w_mat - w_mat.T)
            else:
                w_mat = torch.pow(w_mat - w_mat.T, 2.0)
        else:
            raise ValueError(
                f"Received {weights} for argument ``weights`` but should be either" " None, 'linear' or 'quadratic'"
            )

        k = torch.sum(w_mat * confmat) / torch.sum(w_mat * expected)
        return 1 - k

    # ---- ranking.py
    def _rank_data(x):
        """Rank data based on values."""
        # torch.unique does not support input that requires grad
        with torch.no_grad():
            _, inverse, counts = torch.unique(x, sorted=True, return_inverse=True, return_counts=True)
        ranks = _cumsum(counts, dim=0)
        return ranks[inverse]

    def _ranking_reduce(score, n_elements):
        return score / n_elements

    def _multilabel_coverage_error_update(preds, target):
        offset = torch.zeros_like(preds)
        offset[target == 0] = preds.min().abs() + 10  # Any number >1 works
        preds_mod = preds + offset
        preds_min = preds_mod.min(dim=1)[0]
        coverage = (preds >= preds_min[:, None]).sum(dim=1).to(torch.float32)
        return coverage.sum(), coverage.numel()

    def _multilabel_ranking_average_precision_update(preds, target):
        # Invert so that the highest score receives rank 1
        neg_preds = -preds

        score = torch.tensor(0.0, device=neg_preds.device)
        n_preds, n_labels = neg_preds.shape
        for i in range(n_preds):
            relevant = target[i] == 1
            ranking = _rank_data(neg_preds[i][relevant]).float()
            if len(ranking) > 0 and len(ranking) < n_labels:
                rank = _rank_data(neg_preds[i])[relevant].float()
                score_idx = (ranking / rank).mean()
            else:
                score_idx = torch.ones_like(score)
            score += score_idx
        return score, n_preds

    def _multilabel_ranking_loss_update(preds, target):
        n_preds, n_labels = preds.shape
        relevant = target == 1
        n_relevant = relevant.sum(dim=1)

        # Ignore instances where number of true labels is 0 or n_labels
        mask = (n_relevant > 0) & (n_relevant < n_labels)
        preds = preds[mask]
        relevant = relevant[mask]
        n_relevant = n_relevant[mask]

        # Nothing is relevant
        if len(preds) == 0:
            return torch.tensor(0.0, device=preds.device), 1

        inverse = preds.argsort(dim=1).argsort(dim=1)
        per_label_loss = ((n_labels - inverse) * relevant).to(torch.float32)
        correction = 0.5 * n_relevant * (n_relevant + 1)
        denom = n_relevant * (n_labels - n_relevant)
        loss = (per_label_loss.sum(dim=1) - correction) / denom
        return loss.sum(), n_preds

    def multilabel_coverage_error(preds, target):
        return _ranking_reduce(*_multilabel_coverage_error_update(preds, target))

    def multilabel_ranking_average_precision(preds, target):
        return _ranking_reduce(*_multilabel_ranking_average_precision_update(preds, target))

    def multilabel_ranking_loss(preds, target):
        return _ranking_reduce(*_multilabel_ranking_loss_update(preds, target))

    # ---- hinge.py
    def _hinge_loss_compute(measure, total):
        return measure / total

    def _binary_hinge_loss_update(preds, target, squared):
        target = target.bool()
        margin = torch.zeros_like(preds)
        margin[target] = preds[target]
        margin[~target] = -preds[~target]

        measures = 1 - margin
        measures = torch.clamp(measures, 0)

        if squared:
            measures = measures.pow(2)

        total = tensor(target.shape[0], device=target.device)
        return measures.sum(dim=0), total

    def _multiclass_hinge_loss_update(preds, target, squared, multiclass_mode="crammer-singer"):
        if not torch.all((preds >= 0) * (preds <= 1)):
            preds = preds.softmax(1)

        target = to_onehot(target, max(2, preds.shape[1])).bool()
        if multiclass_mode == "crammer-singer":
            margin = preds[target]
            margin -= torch.max(preds[~target].view(preds.shape[0], -1), dim=1)[0]
        else:
            target = target.bool()
            margin = torch.zeros_like(preds)
            margin[target] = preds[target]
            margin[~target] = -preds[~target]

        measures = 1 - margin
        measures = torch.clamp(measures, 0)

        if squared:
            measures = measures.pow(2)

        total = tensor(target.shape[0], device=target.device)
        return measures.sum(dim=0), total

    def binary_hinge_loss(preds, target, squared=False):
        return _hinge_loss_compute(*_binary_hinge_loss_update(preds, target, squared))

    def multiclass_hinge_loss(preds, target, squared=False, multiclass_mode="crammer-singer"):
        return _hinge_loss_compute(*_multiclass_hinge_loss_update(preds, target, squared, multiclass_mode))

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v) and k != "tensor"})


def _ml_data():
    rng = np.random.default_rng(41)
    preds = rng.uniform(size=(9, 5)).astype(np.float32)
    target = (rng.uniform(size=(9, 5)) < 0.45).astype(np.int64)
    target[0] = 0  # no relevant label
    target[1] = 1  # all relevant
    preds[2, :2] = preds[2, 2]  # ties
    target3 = (rng.uniform(size=(4, 3, 6)) < 0.5).astype(np.int64)
    preds3 = rng.uniform(size=(4, 3, 6)).astype(np.float32)
    return preds, target, preds3, target3


def tm_more_page(torch):
    m = tm_more(torch)
    mc = tm_classification(torch)
    preds, target, preds3, target3 = _ml_data()
    P, T_ = torch.tensor(preds), torch.tensor(target)
    out = {}
    for avg in ("micro", "macro", "weighted", "none"):
        out[f"ml_{avg}"] = _np(m.multilabel_stat_scores(P, T_, 5, average=avg))
    out["ml_samplewise"] = _np(m.multilabel_stat_scores(torch.tensor(preds3), torch.tensor(target3), 3, average="none",
                                                        multidim_average="samplewise"))
    t_ign = T_.clone()
    t_ign[3:5, 1] = -1
    out["ml_ignore"] = _np(m.multilabel_stat_scores(P * 6 - 3, t_ign, 5, average="none", ignore_index=-1))
    logits, target_c, _, _ = _cls_data()
    cm = mc.multiclass_confusion_matrix(torch.tensor(logits), torch.tensor(target_c), 4)
    out["cm"] = _np(cm)
    out["mcc"] = _np(m._matthews_corrcoef_compute(cm))
    cm2 = torch.tensor([[5, 2], [3, 7]])
    out["mcc2"] = _np(m._matthews_corrcoef_compute(cm2))
    out["mcc_degenerate"] = _np(m._matthews_corrcoef_compute(torch.tensor([[4, 0], [3, 0]])))
    for w in (None, "linear", "quadratic"):
        out[f"kappa_{w}"] = _np(m._cohen_kappa_compute(cm, w))
    out["rank"] = _np(m._rank_data(torch.tensor([3.0, 1.0, 3.0, 2.0, 1.0, 5.0])))
    out["coverage"] = _np(m.multilabel_coverage_error(P, T_))
    out["lrap"] = _np(m.multilabel_ranking_average_precision(P, T_))
    out["rank_loss"] = _np(m.multilabel_ranking_loss(P, T_))
    bp = torch.tensor(preds[:, 0])
    bt = torch.tensor(target[:, 0])
    out["hinge_b"] = _np(m.binary_hinge_loss(bp, bt))
    out["hinge_b_sq"] = _np(m.binary_hinge_loss(bp, bt, squared=True))
    lg = torch.tensor(logits)
    tg = torch.tensor(target_c)
    out["hinge_cs"] = _np(m.multiclass_hinge_loss(lg, tg))
    out["hinge_cs_sq_prob"] = _np(m.multiclass_hinge_loss(lg.softmax(1), tg, squared=True))
    out["hinge_ova"] = _np(m.multiclass_hinge_loss(lg, tg, multiclass_mode="one-vs-all"))
    return out


def test_torchmetrics_multilabel_kappa_mcc_ranking_hinge():
    out = _page(tm_more_page)
    preds, target, preds3, target3 = _ml_data()
    pb = preds > 0.5
    tp = (pb & (target == 1)).sum(0)
    fp = (pb & (target == 0)).sum(0)
    tn = (~pb & (target == 0)).sum(0)
    fn = (~pb & (target == 1)).sum(0)
    st = np.stack([tp, fp, tn, fn, tp + fn], -1)
    np.testing.assert_array_equal(out["ml_none"], st)
    np.testing.assert_array_equal(out["ml_micro"], st.sum(0))
    np.testing.assert_allclose(out["ml_macro"], st.mean(0), rtol=1e-6)
    np.testing.assert_allclose(out["ml_weighted"], (st * ((tp + fn) / (tp + fn).sum())[:, None]).sum(0), rtol=1e-6)
    p3 = preds3 > 0.5
    want = np.stack([(p3 & (target3 == 1)).sum(-1), (p3 & (target3 == 0)).sum(-1), (~p3 & (target3 == 0)).sum(-1),
                     (~p3 & (target3 == 1)).sum(-1), (target3 == 1).sum(-1)], -1)
    np.testing.assert_array_equal(out["ml_samplewise"], want)
    keep = np.ones_like(target, bool)
    keep[3:5, 1] = False
    tpi = (pb & (target == 1) & keep).sum(0)
    fpi = (pb & (target == 0) & keep).sum(0)
    tni = (~pb & (target == 0) & keep).sum(0)
    fni = (~pb & (target == 1) & keep).sum(0)
    np.testing.assert_array_equal(out["ml_ignore"], np.stack([tpi, fpi, tni, fni, tpi + fni], -1))  # sigmoid(6p-3) > .5
    cm = out["cm"].astype(float)
    n = cm.sum()
    tk, pk = cm.sum(1), cm.sum(0)
    mcc = (np.trace(cm) * n - tk @ pk) / np.sqrt((n ** 2 - pk @ pk) * (n ** 2 - tk @ tk))
    np.testing.assert_allclose(out["mcc"], mcc, rtol=1e-6)
    TN, FP, FN, TP = 5, 2, 3, 7
    np.testing.assert_allclose(out["mcc2"], (TP * TN - FP * FN) / math.sqrt((TP + FP) * (TP + FN) * (TN + FP) * (TN + FN)),
                               rtol=1e-6)
    assert out["mcc_degenerate"] == 0 and out["mcc_degenerate"].dtype == np.int64  # a never-predicted class
    po, pe = np.trace(cm) / n, (tk @ pk) / n ** 2
    np.testing.assert_allclose(out["kappa_None"], (po - pe) / (1 - pe), rtol=1e-5)
    E = np.outer(tk, pk) / n
    ii = np.arange(4)
    for name, W in (("linear", np.abs(ii[:, None] - ii[None])), ("quadratic", (ii[:, None] - ii[None]) ** 2.0)):
        np.testing.assert_allclose(out[f"kappa_{name}"], 1 - (W * cm).sum() / (W * E).sum(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["rank"], [5, 2, 5, 3, 2, 6])  # ties share the highest rank (cumsum of counts)
    # coverage: how deep in the ranking the last true label sits (0 when no label is true)
    cov = [(preds[i] >= preds[i][target[i] == 1].min()).sum() if target[i].any() else 0 for i in range(9)]
    np.testing.assert_allclose(out["coverage"], np.mean(cov), rtol=1e-6)
    lr = []
    for i in range(9):
        rel = target[i] == 1
        if 0 < rel.sum() < 5:
            lr.append(np.mean([(preds[i][rel] >= s).sum() / (preds[i] >= s).sum() for s in preds[i][rel]]))
        else:
            lr.append(1.0)
    np.testing.assert_allclose(out["lrap"], np.mean(lr), rtol=1e-6)
    rl = 0.0
    for i in range(9):
        rel = target[i] == 1
        if 0 < rel.sum() < 5:
            # pairs (relevant, irrelevant) with the irrelevant label ranked higher; argsort ranks break the tie of
            # sample 2 by position (Lucid's sorts are stable)
            rk = np.argsort(np.argsort(preds[i], kind="stable"), kind="stable")
            rl += (rk[rel][:, None] < rk[~rel][None, :]).sum() / (rel.sum() * (~rel).sum())
    np.testing.assert_allclose(out["rank_loss"], rl / 9, rtol=1e-5)
    p0, t0 = preds[:, 0].astype(float), target[:, 0]
    marg = np.where(t0 == 1, p0, -p0)
    np.testing.assert_allclose(out["hinge_b"], np.clip(1 - marg, 0, None).mean(), rtol=1e-6)
    np.testing.assert_allclose(out["hinge_b_sq"], (np.clip(1 - marg, 0, None) ** 2).mean(), rtol=1e-6)
    logits, target_c, _, _ = _cls_data()
    ex = np.exp(logits - logits.max(1, keepdims=True))
    prob = ex / ex.sum(1, keepdims=True)
    N = len(target_c)
    true_p = prob[np.arange(N), target_c]
    other = np.where(np.eye(4, dtype=bool)[target_c], -np.inf, prob).max(1)
    np.testing.assert_allclose(out["hinge_cs"], np.clip(1 - (true_p - other), 0, None).mean(), rtol=1e-5)
    np.testing.assert_allclose(out["hinge_cs_sq_prob"], (np.clip(1 - (true_p - other), 0, None) ** 2).mean(), rtol=1e-5)
    ova = np.clip(1 - np.where(np.eye(4, dtype=bool)[target_c], prob, -prob), 0, None).mean(0)
    np.testing.assert_allclose(out["hinge_ova"], ova, rtol=1e-5)


def test_torchmetrics_multilabel_kappa_mcc_ranking_hinge_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _page(tm_more_page), tm_more_page(torch)
    for k in a:
        assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, (k, a[k].shape, b[k].shape, a[k].dtype, b[k].dtype)
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=3e-7, err_msg=k)  # float32 (kappa: 1 - k cancels)


# ================================================================ torchmetrics functional/audio: SNR, SI-SDR, SDR, PIT
def tm_audio(torch):
    from itertools import permutations

    norm = torch.linalg.norm
    solve = torch.linalg.solve
    _SCIPY_AVAILABLE = False  # (the exhaustive search is the page; scipy's assignment is optional upstream)
    _ps_dict = {}

    def _symmetric_toeplitz(vector):
        vec_exp = torch.cat([torch.flip(vector, dims=(-1,)), vector[..., 1:]], dim=-1)
        v_len = vector.shape[-1]
        return torch.as_strided(
            vec_exp, size=vec_exp.shape[:-1] + (v_len, v_len), stride=vec_exp.stride()[:-1] + (1, 1)
        ).flip(dims=(-1,))

    def _compute_autocorr_crosscorr(target, preds, corr_len):
        # the valid length for the signal after convolution
        n_fft = 2 ** math.ceil(math.log2(preds.shape[-1] + target.shape[-1] - 1))

        # computes the auto correlation of `target`
        # r_0 is the first row of the symmetric Toeplitz matric
        t_fft = torch.fft.rfft(target, n=n_fft, dim=-1)
        r_0 = torch.fft.irfft(t_fft.real**2 + t_fft.imag**2, n=n_fft)[..., :corr_len]

        # computes the cross-correlation of `target` and `preds`
        p_fft = torch.fft.rfft(preds, n=n_fft, dim=-1)
        b = torch.fft.irfft(t_fft.conj() * p_fft, n=n_fft, dim=-1)[..., :corr_len]

        return r_0, b

    def signal_distortion_ratio(preds, target, use_cg_iter=None, filter_length=512, zero_mean=False, load_diag=None):
        # use double precision
        preds_dtype = preds.dtype
        preds = preds.double()
        target = target.double()

        if zero_mean:
            preds = preds - preds.mean(dim=-1, keepdim=True)
            target = target - target.mean(dim=-1, keepdim=True)

        # normalize along time-axis to make preds and target have unit norm
        target = target / torch.clamp(norm(target, dim=-1, keepdim=True), min=1e-6)
        preds = preds / torch.clamp(norm(preds, dim=-1, keepdim=True), min=1e-6)

        # solve for the optimal filter
        # compute auto-correlation and cross-correlation
        r_0, b = _compute_autocorr_crosscorr(target, preds, corr_len=filter_length)

        if load_diag is not None:
            # the diagonal factor of the Toeplitz matrix is the first coefficient of r_0
            r_0[..., 0] += load_diag

        # regular matrix solver
        r = _symmetric_toeplitz(r_0)  # the auto-correlation of the L shifts of `target`
        sol = solve(r, b)

        # compute the coherence
        coh = torch.einsum("...l,...l->...", b, sol)

        # transform to decibels
        ratio = coh / (1 - coh)
        val = 10.0 * torch.log10(ratio)

        if preds_dtype == torch.float64:
            return val
        return val.float()

    def scale_invariant_signal_distortion_ratio(preds, target, zero_mean=False):
        eps = torch.finfo(preds.dtype).eps

        if zero_mean:
            target = target - torch.mean(target, dim=-1, keepdim=True)
            preds = preds - torch.mean(preds, dim=-1, keepdim=True)

        alpha = (torch.sum(preds * target, dim=-1, keepdim=True) + eps) / (
            torch.sum(target**2, dim=-1, keepdim=True) + eps
        )
        target_scaled = alpha * target

        noise = target_scaled - preds

        val = (torch.sum(target_scaled**2, dim=-1) + eps) / (torch.sum(noise**2, dim=-1) + eps)
        val = 10 * torch.log10(val)

        return val

    def signal_noise_ratio(preds, target, zero_mean=False):
        eps = torch.finfo(preds.dtype).eps

        if zero_mean:
            target = target - torch.mean(target, dim=-1, keepdim=True)
            preds = preds - torch.mean(preds, dim=-1, keepdim=True)

        noise = target - preds

        snr_value = (torch.sum(target**2, dim=-1) + eps) / (torch.sum(noise**2, dim=-1) + eps)
        return 10 * torch.log10(snr_value)

    def scale_invariant_signal_noise_ratio(preds, target):
        return scale_invariant_signal_distortion_ratio(preds=preds, target=target, zero_mean=True)

    def complex_scale_invariant_signal_noise_ratio(preds, target, zero_mean=False):
        if preds.is_complex():
            preds = torch.view_as_real(preds)
        if target.is_complex():
            target = torch.view_as_real(target)

        if (preds.ndim < 3 or preds.shape[-1] != 2) or (target.ndim < 3 or target.shape[-1] != 2):
            raise RuntimeError(
                "Predictions and targets are expected to have the shape (..., frequency, time, 2),"
                f" but got {preds.shape} and {target.shape}."
            )

        preds = preds.reshape(*preds.shape[:-3], -1)
        target = target.reshape(*target.shape[:-3], -1)

        return scale_invariant_signal_distortion_ratio(preds=preds, target=target, zero_mean=zero_mean)

    def _find_best_perm_by_exhaustive_method(metric_mtx, eval_func):
        batch_size, spk_num = metric_mtx.shape[:2]
        key = str(spk_num) + str(metric_mtx.device)
        if key not in _ps_dict:
            # ps: all the permutations, shape [spk_num, perm_num]
            # ps: In i-th permutation, the predcition corresponds to the j-th target is ps[j,i]
            ps = torch.tensor(list(permutations(range(spk_num))), device=metric_mtx.device).T
            _ps_dict[key] = ps
        else:
            ps = _ps_dict[key]  # all the permutations, shape [spk_num, perm_num]

        # find the metric of each permutation
        perm_num = ps.shape[-1]
        # shape [batch_size, spk_num, perm_num]
        bps = ps[None, ...].expand(batch_size, spk_num, perm_num)
        # shape [batch_size, spk_num, perm_num]
        metric_of_ps_details = torch.gather(metric_mtx, 2, bps)
        # shape [batch_size, perm_num]
        metric_of_ps = metric_of_ps_details.mean(dim=1)

        # find the best metric and best permutation
        best_metric, best_indexes = eval_func(metric_of_ps, dim=1)
        best_indexes = best_indexes.detach()
        best_perm = ps.T[best_indexes, :]
        return best_metric, best_perm  # shape [batch], shape [batch, spk]

    def permutation_invariant_training(preds, target, metric_func, eval_func="max", **kwargs):
        if preds.shape[0:2] != target.shape[0:2]:
            raise RuntimeError(
                "Predictions and targets are expected to have the same shape at the batch and speaker dimensions"
            )
        if eval_func not in ["max", "min"]:
            raise ValueError(f'eval_func can only be "max" or "min" but got {eval_func}')

        # calculate the metric matrix
        batch_size, spk_num = target.shape[0:2]
        metric_mtx = None
        for target_idx in range(spk_num):  # we have spk_num speeches in target in each sample
            for preds_idx in range(spk_num):  # we have spk_num speeches in preds in each sample
                if metric_mtx is not None:
                    metric_mtx[:, target_idx, preds_idx] = metric_func(
                        preds[:, preds_idx, ...], target[:, target_idx, ...], **kwargs
                    )
                else:
                    first_ele = metric_func(preds[:, preds_idx, ...], target[:, target_idx, ...], **kwargs)
                    metric_mtx = torch.empty((batch_size, spk_num, spk_num), dtype=first_ele.dtype,
                                             device=first_ele.device)
                    metric_mtx[:, target_idx, preds_idx] = first_ele

        # find best
        op = torch.max if eval_func == "max" else torch.min
        assert not _SCIPY_AVAILABLE
        return _find_best_perm_by_exhaustive_method(metric_mtx, op)

    def pit_permutate(preds, perm):
        preds_pmted = torch.stack([torch.index_select(pred, 0, p) for pred, p in zip(preds, perm)])
        return preds_pmted

    return SimpleNamespace(**{k: v for k, v in locals().items() if callable(v) and k not in ("norm", "solve")})


def _tm_audio_data():
    rng = np.random.default_rng(53)
    target = rng.standard_normal((3, 2, 64))
    # speaker estimates: swapped in sample 1, with some leakage and noise
    preds = 0.8 * target + 0.1 * target[:, ::-1] + 0.2 * rng.standard_normal((3, 2, 64))
    preds[1] = preds[1, ::-1]
    spec_p = rng.standard_normal((2, 5, 6)) + 1j * rng.standard_normal((2, 5, 6))
    spec_t = spec_p + 0.3 * (rng.standard_normal((2, 5, 6)) + 1j * rng.standard_normal((2, 5, 6)))
    return preds, target, spec_p, spec_t


def tm_audio_page(torch):
    m = tm_audio(torch)
    preds, target, spec_p, spec_t = _tm_audio_data()
    P, T_ = torch.tensor(preds), torch.tensor(target)
    out = {}
    out["toeplitz"] = _np(m._symmetric_toeplitz(torch.tensor([0, 1, 2, 3, 4])))
    out["toeplitz_batched"] = _np(m._symmetric_toeplitz(torch.tensor([[1.0, 0.5, 0.25], [2.0, -1.0, 0.0]])))
    out["snr"] = _np(m.signal_noise_ratio(P, T_))
    out["snr_zm32"] = _np(m.signal_noise_ratio(P.float(), T_.float(), zero_mean=True))
    out["si_sdr"] = _np(m.scale_invariant_signal_distortion_ratio(P, T_))
    out["si_snr"] = _np(m.scale_invariant_signal_noise_ratio(P, T_))
    out["c_si_snr"] = _np(m.complex_scale_invariant_signal_noise_ratio(torch.tensor(spec_p), torch.tensor(spec_t)))
    out["sdr"] = _np(m.signal_distortion_ratio(P, T_, filter_length=8))
    out["sdr32_load"] = _np(m.signal_distortion_ratio(P.float(), T_.float(), filter_length=4, zero_mean=True,
                                                      load_diag=1e-3))
    best, perm = m.permutation_invariant_training(P, T_, m.scale_invariant_signal_distortion_ratio, "max")
    out["pit_best"], out["pit_perm"] = _np(best), _np(perm)
    out["pit_permuted"] = _np(m.pit_permutate(P, perm))
    P3, T3 = P[:, :, :32].reshape(3, 2, 32), T_[:, :, :32]
    P3 = torch.cat([P3, T3[:, :1] * 0.5 + P3[:, 1:]], 1)
    T3 = torch.cat([T3, T3[:, 1:] - T3[:, :1]], 1)
    best3, perm3 = m.permutation_invariant_training(P3, T3, m.signal_noise_ratio, "min", zero_mean=True)
    out["pit3_best"], out["pit3_perm"] = _np(best3), _np(perm3)
    out["pit3_in"], out["pit3_tg"] = _np(P3), _np(T3)
    return out


def _si_sdr_np(p, t, zero_mean=False, eps=np.finfo(np.float64).eps):
    if zero_mean:
        p, t = p - p.mean(-1, keepdims=True), t - t.mean(-1, keepdims=True)
    alpha = ((p * t).sum(-1, keepdims=True) + eps) / ((t ** 2).sum(-1, keepdims=True) + eps)
    ts = alpha * t
    return 10 * np.log10(((ts ** 2).sum(-1) + eps) / (((ts - p) ** 2).sum(-1) + eps))


def _snr_np(p, t, zero_mean=False, eps=np.finfo(np.float64).eps):
    if zero_mean:
        p, t = p - p.mean(-1, keepdims=True), t - t.mean(-1, keepdims=True)
    return 10 * np.log10(((t ** 2).sum(-1) + eps) / (((t - p) ** 2).sum(-1) + eps))


def test_torchmetrics_audio_snr_sdr_pit():
    from itertools import permutations

    out = _page(tm_audio_page)
    preds, target, spec_p, spec_t = _tm_audio_data()
    np.testing.assert_array_equal(out["toeplitz"], np.abs(np.arange(5)[:, None] - np.arange(5)[None]))
    for i, v in enumerate(([1.0, 0.5, 0.25], [2.0, -1.0, 0.0])):
        idx = np.abs(np.arange(3)[:, None] - np.arange(3)[None])
        np.testing.assert_array_equal(out["toeplitz_batched"][i], np.array(v)[idx])
    np.testing.assert_allclose(out["snr"], _snr_np(preds, target), rtol=1e-12)
    assert out["snr_zm32"].dtype == np.float32
    np.testing.assert_allclose(out["snr_zm32"], _snr_np(preds, target, True, np.finfo(np.float32).eps), rtol=1e-5)
    np.testing.assert_allclose(out["si_sdr"], _si_sdr_np(preds, target), rtol=1e-12)
    np.testing.assert_allclose(out["si_snr"], _si_sdr_np(preds, target, True), rtol=1e-12)
    rp, rt = np.stack([spec_p.real, spec_p.imag], -1).reshape(2, -1), np.stack([spec_t.real, spec_t.imag], -1).reshape(2, -1)
    np.testing.assert_allclose(out["c_si_snr"], _si_sdr_np(rp, rt), rtol=1e-12)

    def sdr_np(p, t, L, zero_mean=False, load=None):
        if zero_mean:
            p, t = p - p.mean(-1, keepdims=True), t - t.mean(-1, keepdims=True)
        t = t / np.maximum(np.linalg.norm(t, axis=-1, keepdims=True), 1e-6)
        p = p / np.maximum(np.linalg.norm(p, axis=-1, keepdims=True), 1e-6)
        res = np.zeros(p.shape[:-1])
        for idx in np.ndindex(p.shape[:-1]):
            tt, pp = t[idx], p[idx]
            n = len(tt)
            r0 = np.array([(tt[:n - k] * tt[k:]).sum() for k in range(L)])  # autocorrelation
            b = np.array([(tt[:n - k] * pp[k:]).sum() for k in range(L)])  # cross-correlation
            if load is not None:
                r0[0] += load
            h = np.linalg.solve(r0[np.abs(np.arange(L)[:, None] - np.arange(L)[None])], b)
            coh = b @ h
            res[idx] = 10 * np.log10(coh / (1 - coh))
        return res

    np.testing.assert_allclose(out["sdr"], sdr_np(preds, target, 8), rtol=1e-9)
    assert out["sdr32_load"].dtype == np.float32
    p32, t32 = preds.astype(np.float32).astype(float), target.astype(np.float32).astype(float)
    np.testing.assert_allclose(out["sdr32_load"], sdr_np(p32, t32, 4, True, 1e-3), rtol=1e-5)
    # PIT, by brute force over the speaker permutations
    for n, best_key, perm_key, p, t, f, better in (
            (2, "pit_best", "pit_perm", preds, target, _si_sdr_np, max),
            (3, "pit3_best", "pit3_perm", out["pit3_in"], out["pit3_tg"], lambda a, b: _snr_np(a, b, True), min)):
        for i in range(3):
            scores = {perm: np.mean([f(p[i, perm[j]], t[i, j]) for j in range(n)]) for perm in permutations(range(n))}
            want = better(scores, key=scores.get)
            np.testing.assert_array_equal(out[perm_key][i], want)
            np.testing.assert_allclose(out[best_key][i], scores[want], rtol=1e-12)
    np.testing.assert_array_equal(out["pit_perm"], [[0, 1], [1, 0], [0, 1]])  # sample 1's speakers were swapped
    np.testing.assert_array_equal(out["pit_permuted"], np.stack([preds[i, out["pit_perm"][i]] for i in range(3)]))


def test_torchmetrics_audio_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = _page(tm_audio_page), tm_audio_page(torch)
    for k in a:
        assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, (k, a[k].shape, b[k].shape, a[k].dtype, b[k].dtype)
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6 if a[k].dtype == np.float32 else 1e-10, err_msg=k)


# ---------------------------------------------------------------- half precision (the metrics' own float16 branches)
def half_page(torch, dt_name):
    dt = getattr(torch, dt_name)
    rng = np.random.default_rng(61)
    p = rng.standard_normal((16, 2))
    t = 0.7 * p + 0.3 * rng.standard_normal((16, 2))
    reg, cls, aud, fun = tm_regression(torch), tm_classification(torch), tm_audio(torch), ta_functional(torch)
    P, T_ = torch.tensor(p).to(dt), torch.tensor(t).to(dt)
    res = {
        # float16 on the CPU: the variances go through bfloat16 (PyTorch's CPU sqrt lacked float16)
        "pearson": reg.pearson_corrcoef(P, T_),
        "spearman": reg.spearman_corrcoef(P, T_),
        "r2": reg.r2_score(P, T_),
        "kl": reg.kl_divergence(P.abs() + 0.1, T_.abs() + 0.1),
        "cos": reg.cosine_similarity(P, T_),  # ``.float()``: float32
        "si_sdr": aud.scale_invariant_signal_distortion_ratio(P.T, T_.T),
        "sdr": aud.signal_distortion_ratio(P.T, T_.T, filter_length=4),  # in float64, returned as float32
        "auroc": cls.binary_auroc(P[:, 0], torch.tensor((t[:, 0] > 0).astype(np.int64))),
        "mu": fun.mu_law_encoding((P / 4).clamp(-1, 1), 256),
        "db": fun.amplitude_to_DB(P.abs().reshape(1, 4, 8), 10.0, 1e-4, 0.0, 20.0),
    }
    return {k: (str(v.dtype).split(".")[-1], _np(v.float() if v.is_floating_point() else v)) for k, v in res.items()}


def _half_check(dt_name):
    if dt_name == "bfloat16":
        pytest.importorskip("ml_dtypes")
        if lucid.get_default_device().type != "cpu":
            pytest.skip("bfloat16 lives on the CPU only (the stand-in device has none)")
    out = half_page(lucid, dt_name)
    rng = np.random.default_rng(61)
    p = rng.standard_normal((16, 2))
    t = 0.7 * p + 0.3 * rng.standard_normal((16, 2))
    assert {k: v[0] for k, v in out.items()} == {
        "pearson": dt_name, "spearman": dt_name, "r2": dt_name, "kl": dt_name, "cos": "float32", "si_sdr": dt_name,
        "sdr": "float32", "auroc": "float32", "mu": "int64", "db": dt_name}
    tol = dict(rtol=3e-2, atol=3e-2)
    np.testing.assert_allclose(out["pearson"][1], [np.corrcoef(p[:, j], t[:, j])[0, 1] for j in range(2)], **tol)
    rx = [np.corrcoef(_ranks_np(p[:, j]), _ranks_np(t[:, j]))[0, 1] for j in range(2)]
    np.testing.assert_allclose(out["spearman"][1], rx, **tol)
    r2 = 1 - ((t - p) ** 2).sum(0) / ((t - t.mean(0)) ** 2).sum(0)
    np.testing.assert_allclose(out["r2"][1], r2.mean(), **tol)
    np.testing.assert_allclose(out["cos"][1], ((p * t).sum(1) / np.linalg.norm(p, axis=1) / np.linalg.norm(t, axis=1)).sum(),
                               rtol=1e-2)
    np.testing.assert_allclose(out["si_sdr"][1], _si_sdr_np(p.T, t.T), rtol=2e-2)
    pos, neg = p[t[:, 0] > 0, 0], p[t[:, 0] <= 0, 0]
    np.testing.assert_allclose(out["auroc"][1], (pos[:, None] > neg[None]).mean(), atol=0.02)  # half rounding: ties
    mu_want = ((np.sign(p / 4) * np.log1p(255 * np.abs(p / 4)) / np.log1p(255) + 1) / 2 * 255 + 0.5).astype(np.int64)
    assert np.abs(out["mu"][1] - mu_want).max() <= 1
    return out


@pytest.mark.parametrize("dt_name", ["float16", "bfloat16"])
def test_metrics_in_half_precision(dt_name):
    _half_check(dt_name)


@pytest.mark.parametrize("dt_name", ["float16", "bfloat16"])
def test_metrics_in_half_precision_torch_parity(dt_name):
    torch = pytest.importorskip("torch")
    a, b = _half_check(dt_name), half_page(torch, dt_name)
    for k in a:
        assert a[k][0] == b[k][0], (k, a[k][0], b[k][0])
        # float16 composites: Lucid computes in float32 and rounds once, PyTorch's kernels may round between steps
        np.testing.assert_allclose(a[k][1], b[k][1], rtol=1e-2, atol=1e-2, err_msg=k)
