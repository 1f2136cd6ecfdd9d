"""``lucid.nn.modules.channelshuffle``: PyTorch's module path for ``ChannelShuffle``."""
from ..shuffle import ChannelShuffle  # noqa: F401

__all__ = ["ChannelShuffle"]
