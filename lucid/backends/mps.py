"""Apple MPS/Metal probes: unavailable in this build (``to("mps")`` raises, naming it)."""


def is_available() -> bool:
    """False: this build has no Metal backend."""
    return False


def is_built() -> bool:
    """False: this build was not made with Metal support."""
    return False
