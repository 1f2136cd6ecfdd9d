"""``lucid.utils.show_pickle`` (``torch.utils.show_pickle``): print what a pickle holds
without running any of it.

:class:`DumpUnpickler` never imports a module or calls a function: every global the pickle
names becomes a :class:`FakeClass`, every object built from one a :class:`FakeObject` that
records its arguments and state, and persistent ids (a checkpoint's tensor storages) become
``FakeObject("pers", "obj", (pid,))``. So a checkpoint from an untrusted source can be read.

Command line: ``python -m lucid.utils.show_pickle file.pkl``, or ``archive.pt@data.pkl`` for one
member of a zip checkpoint (``archive.pt@*`` for every ``.pkl`` in it).

Examples
--------
>>> import io, pickle, collections
>>> from lucid.utils.show_pickle import DumpUnpickler
>>> data = pickle.dumps({"step": 3, "d": collections.OrderedDict(a=1)})
>>> DumpUnpickler(io.BytesIO(data)).load()
{'step': 3, 'd': collections.OrderedDict()(state={'a': 1})}
"""
from __future__ import annotations

import fnmatch
import io
import pickle
import pprint
import sys
import zipfile

__all__ = ["DumpUnpickler", "FakeClass", "FakeObject", "main"]


class FakeObject:
    """An object the pickle would have built: ``module.name(*args)`` plus its ``state``."""

    def __init__(self, module, name, args):
        self.module, self.name, self.args = module, name, args
        self.state = None  # what BUILD (``__setstate__``) would have received

    def __repr__(self):
        state = "" if self.state is None else f"(state={self.state!r})"
        return f"{self.module}.{self.name}{self.args!r}{state}"

    def __setstate__(self, state):
        self.state = state

    # dict/list subclasses are filled item by item (SETITEMS/APPENDS): keep them as the state
    def __setitem__(self, key, value):
        if not isinstance(self.state, dict):
            self.state = {}
        self.state[key] = value

    def append(self, value):
        if not isinstance(self.state, list):
            self.state = []
        self.state.append(value)

    def extend(self, values):
        for v in values:
            self.append(v)


class FakeClass:
    """A global the pickle names (``module.name``): calling it, or ``__new__`` on it, gives a
    :class:`FakeObject` instead of running anything."""

    def __init__(self, module, name):
        self.module, self.name = module, name
        self.__new__ = self.fake_new  # NEWOBJ calls cls.__new__(cls, *args)

    def __repr__(self):
        return f"{self.module}.{self.name}"

    def __call__(self, *args):
        return FakeObject(self.module, self.name, args)

    def fake_new(self, *args):
        return FakeObject(self.module, self.name, args[1:])


class DumpUnpickler(pickle._Unpickler):  # the Python unpickler: its hooks see every global
    """An unpickler that builds :class:`FakeClass`/:class:`FakeObject` placeholders instead of
    importing and calling what the pickle names (see the module docstring)."""

    def __init__(self, file, *, catch_invalid_utf8=False, **kwargs):
        super().__init__(file, **kwargs)
        self.catch_invalid_utf8 = catch_invalid_utf8

    def find_class(self, module, name):
        return FakeClass(module, name)

    def persistent_load(self, pid):
        return FakeObject("pers", "obj", (pid,))

    def load_binunicode(self):  # an undecodable string is shown as its bytes (catch_invalid_utf8)
        if not self.catch_invalid_utf8:
            return super().load_binunicode()
        (n,) = pickle.struct.unpack("<I", self.read(4))
        raw = self.read(n)
        try:
            self.append(str(raw, "utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            self.append(FakeObject("builtin", "UnicodeDecodeError", (raw,)))

    dispatch = dict(pickle._Unpickler.dispatch)
    dispatch[pickle.BINUNICODE[0]] = load_binunicode

    @classmethod
    def dump(cls, in_stream, out_stream):
        """Load the pickle in ``in_stream`` as placeholders, pretty-print it to ``out_stream``
        and return it."""
        value = cls(in_stream).load()
        pprint.pprint(value, stream=out_stream)
        return value


def main(argv, output_stream=None):
    """``show_pickle FILE`` or ``show_pickle ARCHIVE@MEMBER`` (``*`` patterns allowed): print each."""
    if len(argv) != 2:
        if output_stream is not None:
            raise ValueError("main: pass exactly one argument (a file, or archive@member)")
        sys.stderr.write("usage: show_pickle PICKLE_FILE | ARCHIVE.pt@MEMBER.pkl | ARCHIVE.pt@*.pkl\n")
        sys.exit(2)
    out = output_stream or sys.stdout
    target = argv[1]
    if "@" not in target:
        with open(target, "rb") as f:
            DumpUnpickler.dump(f, out)
        return
    archive, _, pattern = target.partition("@")
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        if "*" in pattern or "?" in pattern:
            chosen = [n for n in names if fnmatch.fnmatch(n, pattern) or fnmatch.fnmatch(n.split("/", 1)[-1], pattern)]
        else:
            chosen = [n for n in names if n == pattern or n.split("/", 1)[-1] == pattern]
        if not chosen:
            raise FileNotFoundError(f"show_pickle: no member {pattern!r} in {archive} (members: {names})")
        for name in chosen:
            if len(chosen) > 1:
                out.write(f"@{name}\n")
            with zf.open(name) as f:
                DumpUnpickler.dump(io.BytesIO(f.read()), out)


if __name__ == "__main__":
    main(sys.argv)
