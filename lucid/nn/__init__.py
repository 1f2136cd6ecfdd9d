"""lucid.nn: modules, layers, losses.

Examples
--------
>>> import lucid
>>> import lucid.nn as nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> model(lucid.zeros(3, 4)).shape
(3, 2)
"""
from .parameter import Buffer, Parameter
from .module import Module, RemovableHandle
from .containers import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .activation import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .sparse import *  # noqa: F401,F403
from .flatten import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403
from .transformer import *  # noqa: F401,F403
from .upsampling import *  # noqa: F401,F403
from .distance import *  # noqa: F401,F403
from .padding import *  # noqa: F401,F403
from .shuffle import *  # noqa: F401,F403
from .lazy import *  # noqa: F401,F403
from .adaptive import *  # noqa: F401,F403
from .linear_cross_entropy import *  # noqa: F401,F403
from .lucid3 import *  # noqa: F401,F403  (Lucid 3 names: FusedLinear, RotaryEmbedding ...)
from . import attention, functional, grad, init, modules, parallel, utils  # noqa: F401
from .parallel import DataParallel  # noqa: F401
from .modules.module import (register_module_forward_hook, register_module_forward_pre_hook,  # noqa: F401
                             register_module_full_backward_hook, register_module_full_backward_pre_hook)
