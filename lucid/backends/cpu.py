"""``lucid.backends.cpu`` (``torch.backends.cpu``)."""
from __future__ import annotations

from ._numpy_build import simd


def get_cpu_capability() -> str:
    """The widest vector instruction set lucid's CPU kernels (NumPy's) use here, in PyTorch's
    names: ``"AVX512"``, ``"AVX2"`` or ``"DEFAULT"`` (also on non-x86 CPUs, as PyTorch without SVE).

    Examples
    --------
    >>> import lucid
    >>> lucid.backends.cpu.get_cpu_capability() in ("AVX512", "AVX2", "DEFAULT")
    True
    """
    found = set(simd())
    if any(t.startswith("AVX512") for t in found) or "X86_V4" in found:
        return "AVX512"
    if "AVX2" in found or "X86_V3" in found:
        return "AVX2"
    return "DEFAULT"
