"""``lucid.utils.file_baton`` (``torch.utils.file_baton``): :class:`FileBaton`, a lock between
processes made of a file that only one of them can create.

Examples
--------
>>> import os, tempfile
>>> from lucid.utils.file_baton import FileBaton
>>> path = os.path.join(tempfile.mkdtemp(), "lock")
>>> a, b = FileBaton(path), FileBaton(path)
>>> a.try_acquire(), b.try_acquire()
(True, False)
>>> a.release(); b.try_acquire()
True
>>> b.release()
"""
from __future__ import annotations

import os
import time
import warnings

__all__ = ["FileBaton"]


class FileBaton:
    """A baton: whoever creates ``lock_file_path`` holds it until :meth:`release` deletes it.

    Parameters
    ----------
    lock_file_path : str
        The file whose creation is the lock.
    wait_seconds : float
        How long :meth:`wait` sleeps between checks.
    warn_after_seconds : float, optional
        :meth:`wait` warns once it has waited this long (a crashed holder leaves the file).
    """

    def __init__(self, lock_file_path, wait_seconds=0.1, warn_after_seconds=None):
        self.lock_file_path = lock_file_path
        self.wait_seconds = wait_seconds
        self.warn_after_seconds = warn_after_seconds
        self.fd = None

    def try_acquire(self):
        """Create the lock file; True if this call did (the baton is ours), False if it existed."""
        try:
            self.fd = os.open(self.lock_file_path, os.O_CREAT | os.O_EXCL)
            return True
        except FileExistsError:
            return False

    def wait(self):
        """Block until the lock file is gone (its holder released it); does not acquire it."""
        start = time.monotonic()
        warned = False
        while os.path.exists(self.lock_file_path):
            time.sleep(self.wait_seconds)
            waited = time.monotonic() - start
            if self.warn_after_seconds is not None and waited > self.warn_after_seconds and not warned:
                warnings.warn(f"FileBaton: waited {waited:.1f} s for {self.lock_file_path}; if no process holds "
                              "it any more, delete the file", stacklevel=2)
                warned = True

    def release(self):
        """Close and delete the lock file (held by this baton)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        os.remove(self.lock_file_path)
