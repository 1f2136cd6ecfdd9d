"""``lucid.utils.model_zoo.load_url``: PyTorch's old name of :func:`lucid.hub.load_state_dict_from_url`."""
from ..hub import load_state_dict_from_url as load_url

__all__ = ["load_url"]
