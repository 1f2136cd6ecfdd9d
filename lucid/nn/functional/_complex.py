"""The complex-input refusal shared by the functional ops PyTorch implements for real tensors only."""
from __future__ import annotations


# NOTE [Losses refuse complex input]
# PyTorch computes l1_loss (|d| is real), triplet_margin_loss, poisson_nll_loss and
# gaussian_nll_loss for complex input and refuses every other loss (mse "not implemented for
# 'ComplexDouble'", kl_div "Complex inputs not supported"...), and likewise the normalizations
# (layer/group/batch/instance/local-response norm), mish, glu, logsigmoid, adaptive average
# pooling, interpolate, embedding_bag and cosine_similarity. Those check their inputs here,
# before any work, so the error names the op rather than whichever op inside it happens to fail
# first, or, worse, a complex result comes back (mse_loss of complex d is mean(d * d), not
# mean(|d|^2); layer_norm would divide by a complex "variance").
def refuse_complex(name, *tensors):
    """Raise a TypeError naming ``name`` if any of ``tensors`` is complex."""
    for t in tensors:
        dt = getattr(t, "dtype", None)
        if dt is not None and dt.kind == "c":
            got = ", ".join(str(getattr(v, "dtype", type(v).__name__)) for v in tensors)
            raise TypeError(f"{name}: complex inputs are not supported, as in PyTorch (got {got}); work on "
                            f"real coordinates (lucid.view_as_real) or magnitudes (.abs()) instead")
