"""CUDA matmul flags (``lucid.backends.cuda.matmul.allow_tf32``): settable, without effect."""


class _Matmul:
    allow_tf32 = False
    allow_fp16_reduced_precision_reduction = True
    allow_bf16_reduced_precision_reduction = True


matmul = _Matmul()


def is_built() -> bool:
    """False: this build was not made with CUDA."""
    return False
