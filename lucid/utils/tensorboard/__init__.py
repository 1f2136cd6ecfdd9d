"""lucid.utils.tensorboard: ``SummaryWriter`` for TensorBoard, as ``torch.utils.tensorboard``.

Writes TensorBoard event files with NumPy and the standard library only (no tensorboard,
protobuf or Pillow import; see NOTE [Event files without protobuf] in ``_records.py``). This
package is loaded on first use: ``import lucid.utils`` does not import it.
"""
from .writer import SummaryWriter

__all__ = ["SummaryWriter"]
