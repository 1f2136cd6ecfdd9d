"""Shape primitives and the shape ops composed from them, by family.

- ``views``: reshape/view, transpose/permute, broadcast_to/expand, squeeze/unsqueeze, flatten,
  detach, and ``errors_as`` (PyTorch's error names for shape errors);
- ``joining``: cat, stack;
- ``slicing``: narrow, select, split, chunk, unbind, view_as, reshape_as;
- ``rearrange``: flip, roll, repeat, tile, repeat_interleave;
- ``padding``: pad;
- ``stacking``: NumPy-style hstack/vstack/..., splits, flips, diff, block_diag (composites);
- ``strided``: unfold and as_strided (real views, NOTE [Strided views]);
- ``triangles``: tril, triu, diag, diagonal, diag_embed, meshgrid.

Views (reshape, transpose, broadcast_to, basic indexing) alias their input's memory
and share its version counter, as in PyTorch.
"""
from . import joining, padding, rearrange, slicing, stacking, strided, triangles, views
from .joining import *  # noqa: F401,F403
from .padding import *  # noqa: F401,F403
from .rearrange import *  # noqa: F401,F403
from .slicing import *  # noqa: F401,F403
from .stacking import *  # noqa: F401,F403
from .strided import *  # noqa: F401,F403
from .triangles import *  # noqa: F401,F403
from .views import *  # noqa: F401,F403
from .views import errors_as  # noqa: F401  (used across lucid.ops)

__all__ = (views.__all__ + joining.__all__ + slicing.__all__ + rearrange.__all__ + padding.__all__
           + triangles.__all__ + strided.__all__ + stacking.__all__)
