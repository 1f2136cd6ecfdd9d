"""lucid.optim: optimizers (updates in place, no graph) and learning-rate schedulers."""
from . import lr_scheduler
from .adafactor import Adafactor, SparseAdam
from .adam import Adam, Adamax, AdamW, NAdam, RAdam
from .adaptive import Adadelta, Adagrad, RMSprop
from .classic import ASGD, Rprop
from .lbfgs import LBFGS
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad",
           "Adadelta", "LBFGS", "ASGD", "Rprop", "SparseAdam", "Adafactor", "lr_scheduler"]
