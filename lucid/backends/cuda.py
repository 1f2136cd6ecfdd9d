"""CUDA matmul flags (``lucid.backends.cuda.matmul.allow_tf32``): settable, without effect."""


class _Matmul:
    allow_tf32 = False
    allow_fp16_reduced_precision_reduction = True
    allow_bf16_reduced_precision_reduction = True


matmul = _Matmul()


def is_built() -> bool:
    """False: this build was not made with CUDA."""
    return False


def sdp_kernel(enable_flash=True, enable_math=True, enable_mem_efficient=True, enable_cudnn=True):
    """Deprecated spelling of :func:`lucid.nn.attention.sdpa_kernel` (a context manager).

    Each flag allows one backend inside the block, as PyTorch's; Lucid runs only the math one.

    Examples
    --------
    >>> import warnings, lucid
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     with lucid.backends.cuda.sdp_kernel(enable_flash=False):
    ...         pass
    """
    import warnings

    from ..nn.attention import SDPBackend, sdpa_kernel

    warnings.warn(
        "`torch.backends.cuda.sdp_kernel()` is deprecated. In the future, this context manager will be "
        "removed. Please see `torch.nn.attention.sdpa_kernel()` for the new context manager, with updated "
        "signature.",
        FutureWarning,
        stacklevel=2,
    )
    flags = (
        (enable_flash, SDPBackend.FLASH_ATTENTION),
        (enable_math, SDPBackend.MATH),
        (enable_mem_efficient, SDPBackend.EFFICIENT_ATTENTION),
        (enable_cudnn, SDPBackend.CUDNN_ATTENTION),
    )
    return sdpa_kernel([backend for enabled, backend in flags if enabled])
