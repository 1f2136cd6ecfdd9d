"""What the quantized modules share."""


def observed_qparams(observer):
    """``(scale, zero_point)`` of an activation observer as Python numbers (PyTorch keeps them so)."""
    scale, zero_point = observer.calculate_qparams()
    return float(scale), int(zero_point)
