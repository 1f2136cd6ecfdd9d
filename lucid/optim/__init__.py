"""lucid.optim: optimizers (updates in place, no graph) and learning-rate schedulers."""
from . import lr_scheduler
from .adafactor import Adafactor, SparseAdam
from .muon import Muon
from .adam import Adam, Adamax, AdamW, NAdam, RAdam
from .adaptive import Adadelta, Adagrad, RMSprop
from .classic import ASGD, Rprop
from .lbfgs import LBFGS
from .optimizer import Optimizer
from .sgd import SGD
from ._stateless import swap_in_optimizer_params_and_state
# Lucid 3 also names its schedulers here (lucid.optim.StepLR); PyTorch keeps them in lr_scheduler
from .lr_scheduler import (ChainedScheduler, ConstantLR, CosineAnnealingLR, CosineAnnealingWarmRestarts,  # noqa: F401
                           CyclicLR, ExponentialLR, LambdaLR, LinearLR, LRScheduler, MultiplicativeLR, MultiStepLR,
                           NoamScheduler, OneCycleLR, PolynomialLR, ReduceLROnPlateau, SequentialLR, StepLR)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad",
           "Adadelta", "LBFGS", "ASGD", "Rprop", "SparseAdam", "Adafactor", "Muon", "lr_scheduler", "swa_utils",
           "swap_in_optimizer_params_and_state"]


def __getattr__(name):
    # swa_utils needs lucid.nn: import it on first use so `import lucid.optim` stays light.
    if name == "swa_utils":
        import importlib

        return importlib.import_module(".swa_utils", __name__)
    raise AttributeError(f"module 'lucid.optim' has no attribute {name!r}")
