"""``lucid.distributed.checkpoint.state_dict_loader`` (PyTorch's module of the same name):
:func:`load` and its deprecated alias :func:`load_state_dict`.

Examples
--------
>>> from lucid.distributed.checkpoint.state_dict_loader import load
>>> load.__name__
'load'
"""
from ._save_load import Stateful, load, load_state_dict

__all__ = ["Stateful", "load", "load_state_dict"]
