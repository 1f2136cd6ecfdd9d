"""cuDNN flags: settable, without effect (no cuDNN in a CPU-only build)."""

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: this build has no cuDNN."""
    return False


def version():
    """None: no cuDNN library is loaded."""
    return None
