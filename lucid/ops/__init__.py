"""All operations, by family. Importing this package registers every primitive."""
from . import _family  # noqa: F401
from .elementwise import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .creation import *  # noqa: F401,F403
from . import misc  # noqa: F401
