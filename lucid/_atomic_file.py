"""Atomic file writes: a file is complete or untouched, never truncated.

Shared by ``lucid.save``, ``save_for_torch`` and the profiler's trace exports.

NOTE [Safe save]
``atomic_write(path, fill)`` never replaces anything but a regular file: a symlink is
followed and its final target is replaced (atomically, in the target's directory), a FIFO,
device, socket or directory is refused (saving to ``/dev/null`` as root must not replace the
system's ``/dev/null``). The data goes to a temporary file beside the target, which is
flushed, fsynced, given the target's permissions and ``os.replace``d onto it; then the
directory is fsynced. The temporary file is named ``.<name>.lucid-tmp-<pid>-<random>`` so a
write that was killed can be recognised: the next write of the same target removes such
files whose process is gone. Errors name the target (and the API), never the temporary file.
"""
from __future__ import annotations

import os
import stat
import tempfile

_TMP_TAG = ".lucid-tmp-"


def atomic_write(path, fill, api="lucid.save"):
    """Call ``fill(file)`` on a temporary file beside ``path`` and rename it onto ``path`` once
    complete (NOTE [Safe save]).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write; a symlink is followed; a FIFO, device, socket or directory is
        refused with a ValueError.
    fill : callable
        ``fill(binary_file)`` writes the contents. If it raises, the target is untouched and
        the temporary file removed.
    api : str
        The name errors start with (``"lucid.save"``, ``"save_for_torch"`` ...).

    Examples
    --------
    >>> import os, tempfile
    >>> from lucid._atomic_file import atomic_write
    >>> path = os.path.join(tempfile.mkdtemp(), "out.bin")
    >>> atomic_write(path, lambda f: f.write(b"abc"))
    >>> open(path, "rb").read()
    b'abc'
    """
    path = os.fspath(path)
    target = _resolve_target(path, api)
    directory = os.path.dirname(target)
    _clean_stale_temps(target)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(target) + f"{_TMP_TAG}{os.getpid()}-",
                                   suffix=".tmp")
    except OSError as e:
        raise _named(e, path, api) from None
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, _target_mode(target))
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise _named(e, path, api) from None
        raise
    _fsync_dir(directory)


def _resolve_target(path, api):
    """The regular file (existing or not) that writing to ``path`` should replace."""
    target = os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as e:
        raise _named(e, path, api) from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        via = f" (via the symlink {os.fspath(path)!r})" if target != os.path.abspath(path) else ""
        raise ValueError(f"{api}: refusing to replace {target!r}{via}: it is {kind}, not a regular "
                         "file; to stream into it, open it and pass the file object")
    return target


def _named(e, path, api, what="writing"):
    """The same kind of OSError, naming the target instead of a temporary file."""
    text = f"{api}: {what} {os.fspath(path)!r} failed: {e.strerror or e}"
    try:
        return type(e)(e.errno, text) if e.errno else type(e)(text)
    except Exception:  # pragma: no cover - exotic OSError subclasses
        return OSError(text)


def _clean_stale_temps(target):
    """Remove temporary files of earlier writes of ``target`` whose process has died."""
    directory, base = os.path.split(target)
    prefix = "." + base + _TMP_TAG
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return
    for n in names:
        pid = n[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            try:
                os.unlink(os.path.join(directory, n))
            except OSError:
                pass


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. EPERM: it exists
        return True
    return True


def _target_mode(path):
    """The permissions the new file gets: the replaced file's, else the umask's default."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_dir(directory):
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)
