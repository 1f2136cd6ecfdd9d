"""File pipes: FileLister (``list_files``), FileOpener (``open_files``), StreamReader
(``read_from_stream``) and RoutedDecoder (``routed_decode``)."""
from __future__ import annotations

import fnmatch
import os
import warnings

from .._decorator import functional_datapipe
from ..datapipe import IterDataPipe
from ..utils.common import StreamWrapper
from ..utils.decoder import Decoder, basichandlers, extension_extract_fn
from .utils import IterableWrapperIterDataPipe, _length_of


def _match_masks(name, masks):
    if not masks:
        return True
    if isinstance(masks, str):
        masks = [masks]
    return any(fnmatch.fnmatch(name, m) for m in masks)


def _pathnames_under(root, masks, recursive, abspath, non_deterministic):
    """The files at ``root`` (a file or a directory) whose name matches ``masks``, sorted per directory."""
    if os.path.isfile(root):
        path = os.path.abspath(root) if abspath else root
        if _match_masks(os.path.basename(path), masks):
            yield path
        return

    def onerror(err):
        warnings.warn(f"{err.filename} : {err.strerror}", stacklevel=2)
        raise err

    for path, dirs, files in os.walk(root, onerror=onerror):
        if abspath:
            path = os.path.abspath(path)
        if not non_deterministic:
            files.sort()
            dirs.sort()
        for f in files:
            if _match_masks(f, masks):
                yield os.path.join(path, f)
        if not recursive:
            break


@functional_datapipe("list_files")
class FileListerIterDataPipe(IterDataPipe):
    """The pathnames of the files under ``root`` (functional name: ``list_files``).

    Parameters
    ----------
    root : str, sequence of str or IterDataPipe
    masks : str or list of str
        Unix-style patterns for the file names (``""``: all).
    recursive, abspath, non_deterministic : bool
    length : int
        The length to report (``-1``: none, ``len`` raises TypeError).

    Examples
    --------
    >>> import tempfile, os
    >>> from lucid.utils.data.datapipes.iter import FileLister
    >>> d = tempfile.mkdtemp(); open(os.path.join(d, "a.txt"), "w").close()
    >>> [os.path.basename(p) for p in FileLister(d, "*.txt")]
    ['a.txt']
    """

    def __init__(self, root=".", masks="", *, recursive=False, abspath=False, non_deterministic=False,
                 length=-1):
        if isinstance(root, str):
            root = [root]
        if not isinstance(root, IterDataPipe):
            root = IterableWrapperIterDataPipe(root)
        self.datapipe, self.masks = root, masks
        self.recursive, self.abspath, self.non_deterministic = recursive, abspath, non_deterministic
        self.length = length

    def __iter__(self):
        for path in self.datapipe:
            yield from _pathnames_under(path, self.masks, self.recursive, self.abspath, self.non_deterministic)

    def __len__(self):
        if self.length == -1:
            raise TypeError(f"{type(self).__name__} instance doesn't have valid length")
        return self.length


@functional_datapipe("open_files")
class FileOpenerIterDataPipe(IterDataPipe):
    """``(pathname, stream)`` for each pathname (functional name: ``open_files``).

    Parameters
    ----------
    datapipe : IterDataPipe of str
    mode : {"r", "b", "t", "rb", "rt"}
    encoding : str, optional
        Text modes only.
    length : int
    """

    def __init__(self, datapipe, mode="r", encoding=None, length=-1):
        if mode not in ("b", "t", "rb", "rt", "r"):
            raise ValueError(f"Invalid mode {mode}")
        if "b" in mode and encoding is not None:
            raise ValueError("binary mode doesn't take an encoding argument")
        self.datapipe = datapipe
        self.mode = "r" + mode if mode in ("b", "t") else mode
        self.encoding, self.length = encoding, length

    def __iter__(self):
        for pathname in self.datapipe:
            if not isinstance(pathname, str):
                raise TypeError(f"Expected string type for pathname, but got {type(pathname)}")
            yield pathname, StreamWrapper(open(pathname, self.mode, encoding=self.encoding))

    def __len__(self):
        if self.length == -1:
            raise TypeError(f"{type(self).__name__} instance doesn't have valid length")
        return self.length


@functional_datapipe("read_from_stream")
class StreamReaderIterDataPipe(IterDataPipe):
    """``(pathname, chunk)`` read from each ``(pathname, stream)``; the stream is closed at its end
    (functional name: ``read_from_stream``).

    Parameters
    ----------
    datapipe : IterDataPipe of (str, stream)
    chunk : int, optional
        Bytes (or characters) per chunk; default: the whole stream at once.
    """

    def __init__(self, datapipe, chunk=None):
        self.datapipe, self.chunk = datapipe, chunk

    def __iter__(self):
        for pathname, stream in self.datapipe:
            while True:
                data = stream.read(self.chunk) if self.chunk else stream.read()
                if not data:
                    stream.close()
                    break
                yield pathname, data


@functional_datapipe("routed_decode")
class RoutedDecoderIterDataPipe(IterDataPipe):
    """``(pathname, decoded)`` for each ``(pathname, bytes or binary stream)``, decoded by the first
    handler (by default ``basichandlers``) that accepts its extension (functional name: ``routed_decode``).

    Parameters
    ----------
    datapipe : IterDataPipe of (str, bytes or stream)
    *handlers : callable
        ``handler(extension, data)``; returns None to pass.
    key_fn : callable
        Pathname to the key handlers see (default: the extension).
    """

    def __init__(self, datapipe, *handlers, key_fn=extension_extract_fn):
        self.datapipe = datapipe
        self.decoder = Decoder(*(handlers or (basichandlers,)), key_fn=key_fn)

    def add_handler(self, *handler):
        self.decoder.add_handler(*handler)

    def __iter__(self):
        for data in self.datapipe:
            pathname = data[0]
            yield pathname, self.decoder(data)[pathname]

    def __len__(self):
        return _length_of(self, self.datapipe)


FileLister = FileListerIterDataPipe
FileOpener = FileOpenerIterDataPipe
StreamReader = StreamReaderIterDataPipe
RoutedDecoder = RoutedDecoderIterDataPipe
