"""``lucid.distributed.launch`` (``torch.distributed.launch``): the deprecated launcher module,
``python -m lucid.distributed.launch --nproc_per_node=2 train.py``, which is ``lucid-run``.

PyTorch's spellings with underscores (``--nproc_per_node``) are accepted; ``--use_env`` is
accepted and changes nothing (ranks always find ``RANK``/``WORLD_SIZE`` in the environment
and get no ``--local-rank`` argument). It warns, as PyTorch's does, that ``lucid-run`` (PyTorch:
``torchrun``) is the launcher to use.

Examples
--------
>>> from lucid.distributed.launch import parse_args
>>> parse_args(["--nproc_per_node=2", "train.py", "--lr", "0.1"]).nproc
2
"""
from __future__ import annotations

import sys
import warnings

from . import run as _run

__all__ = ["get_args_parser", "parse_args", "launch", "main", "run"]

_LEGACY_FLAGS = {"--nproc_per_node": "--nproc-per-node", "--use_env": None, "--use-env": None}


def _translate(argv):
    """PyTorch's launch flags in ``lucid-run``'s spelling, up to the script (its own args stay)."""
    out, script_seen = [], False
    for arg in argv:
        if script_seen or not arg.startswith("--"):
            script_seen = script_seen or not arg.startswith("-")
            out.append(arg)
            continue
        name, eq, value = arg.partition("=")
        if name in _LEGACY_FLAGS:
            if _LEGACY_FLAGS[name] is None:
                continue
            name = _LEGACY_FLAGS[name]
        out.append(name + eq + value)
    return out


def get_args_parser():
    """The argument parser (``lucid-run``'s)."""
    return _run._parser()


def parse_args(args):
    """Parse launcher arguments (PyTorch's spellings accepted)."""
    return get_args_parser().parse_args(_translate(list(args)))


def run(args):
    """Launch with the argument list ``args``; returns the job's exit status."""
    return _run.main(_translate(list(args)))


def launch(args):
    """Launch with the argument list ``args`` (PyTorch's name); returns the exit status."""
    return run(args)


def main(args=None):
    """``python -m lucid.distributed.launch ...``: warn, then run ``lucid-run``."""
    warnings.warn("lucid.distributed.launch is deprecated: use lucid-run (python -m lucid.distributed.run) "
                  "instead, as torchrun replaces torch.distributed.launch", FutureWarning, stacklevel=2)
    return run(sys.argv[1:] if args is None else args)


if __name__ == "__main__":
    sys.exit(main())
