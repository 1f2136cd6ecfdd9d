"""lucid.nn.functional: stateless versions of the layers, activations and losses.

Examples
--------
>>> import lucid
>>> import lucid.nn.functional as F
>>> F.relu(lucid.tensor([-1.0, 2.0]))
tensor([0., 2.])
"""
from .activation import *  # noqa: F401,F403
from .activation_extra import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .sparse import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .vision import *  # noqa: F401,F403
from .distance import *  # noqa: F401,F403
from .pooling_extra import *  # noqa: F401,F403
from .loss_extra import *  # noqa: F401,F403
from .grid import *  # noqa: F401,F403
from .linear_cross_entropy import *  # noqa: F401,F403
from .grouped_mm import *  # noqa: F401,F403
from .lucid3 import *  # noqa: F401,F403  (Lucid 3 names: fused_linear_relu, sinusoidal_embedding ...)



def pad(input, pad, mode="constant", value=None):
    """Pad ``input`` (re-export of :func:`lucid.pad`; see it for the parameters).

    Parameters
    ----------
    input : Tensor
        The tensor to pad.
    pad : tuple of int
        ``(left, right)`` pairs, starting from the last dim.
    mode : str
        'constant', 'reflect', 'replicate' or 'circular'.
    value : float, optional
        The fill value for 'constant' (default 0).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.pad(lucid.tensor([1.0, 2.0]), (1, 2)).tolist()
    [0.0, 1.0, 2.0, 0.0, 0.0]
    """
    import lucid

    if not hasattr(lucid, "pad"):
        raise NotImplementedError("pad: lucid.pad is not available in this build")
    return lucid.pad(input, pad, mode=mode, value=value)


def __getattr__(name):
    # torch.nn.functional.grad is the torch.nn.grad module (conv adjoints); loaded on use since
    # lucid.nn imports this package before that module.
    if name == "grad":
        from .. import grad

        return grad
    raise AttributeError(f"module 'lucid.nn.functional' has no attribute {name!r}")
