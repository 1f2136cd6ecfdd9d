"""Decoding ``(pathname, bytes or stream)`` pairs by file extension, for ``routed_decode``."""
from __future__ import annotations

import io
import json
import os
import pickle

from .common import StreamWrapper


def basichandlers(extension, data):
    """Bytes to a Python object by extension: txt/text/transcript -> str, cls/cls2/class/count/
    index/inx/id -> int (None if not an int), json/jsn -> parsed JSON, pickle/pyd -> unpickled;
    other extensions -> None (not handled)."""
    if extension in ("txt", "text", "transcript"):
        return data.decode("utf-8")
    if extension in ("cls", "cls2", "class", "count", "index", "inx", "id"):
        try:
            return int(data)
        except ValueError:
            return None
    if extension in ("json", "jsn"):
        return json.loads(data)
    if extension in ("pyd", "pickle"):
        return pickle.loads(data)
    return None


def extension_extract_fn(pathname):
    """The extension of ``pathname`` without its dot (``""`` if none)."""
    return os.path.splitext(pathname)[1][1:]


class Decoder:
    """Decode ``(key, data)`` pairs with the first handler that returns something other than None.

    Parameters
    ----------
    *handler : callable
        ``handler(key, data)`` where ``key`` is ``key_fn(pathname)``.
    key_fn : callable
    """

    def __init__(self, *handler, key_fn=extension_extract_fn):
        self.handlers = list(handler)
        self.key_fn = key_fn

    def add_handler(self, *handler):
        """Put ``handler`` before the existing ones."""
        self.handlers = list(handler) + self.handlers

    @staticmethod
    def _is_stream_handle(data):
        inner = data.file_obj if isinstance(data, StreamWrapper) else data
        return isinstance(inner, (io.BufferedIOBase, io.RawIOBase))

    def decode1(self, key, data):
        if not data:
            return data
        if Decoder._is_stream_handle(data):
            stream = data
            data = b"".join(data)
            stream.close()
        for handler in self.handlers:
            result = handler(key, data)
            if result is not None:
                return result
        return data

    def decode(self, data):
        if isinstance(data, tuple):
            data = [data]
        result = {}
        for k, v in data or ():
            if k[0] == "_" and isinstance(v, bytes):  # (private keys are text, never decoded further)
                result[k] = v.decode("utf-8")
                continue
            result[k] = self.decode1(self.key_fn(k), v)
        return result

    def __call__(self, data):
        return self.decode(data)
