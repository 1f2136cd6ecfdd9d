"""Convert between a distributed checkpoint directory and a single ``lucid.save`` file."""
from __future__ import annotations

import os

__all__ = ["dcp_to_torch_save", "torch_save_to_dcp"]


def dcp_to_torch_save(dcp_checkpoint_dir, torch_save_path):
    """Write the full (unsharded) state dict of a DCP directory into one ``lucid.save`` file.

    The saved nesting is rebuilt from the paths the metadata records, as PyTorch's converter
    does: ``{"model": {"w": ...}}`` comes back nested, dict keys as strings, walked lists as lists.

    Examples
    --------
    >>> import os, tempfile, lucid
    >>> import lucid.distributed.checkpoint as dcp
    >>> from lucid.distributed.checkpoint.format_utils import dcp_to_torch_save
    >>> d = tempfile.mkdtemp()
    >>> _ = dcp.save({"w": lucid.ones(2)}, checkpoint_id=d)
    >>> dcp_to_torch_save(d, os.path.join(d, "full.pt"))
    >>> lucid.load(os.path.join(d, "full.pt"))["w"]
    tensor([1., 1.])
    """
    from ... import serialization
    from ._save_load import Metadata, _assemble

    path = os.fspath(dcp_checkpoint_dir)
    meta = Metadata._read(path).state_dict_metadata
    files = {}

    def read(f, k):
        if f not in files:
            files[f] = serialization.load(os.path.join(path, f), weights_only=True)
        return files[f][k]

    out = {}
    for key, entry in meta.items():
        if entry["kind"] == "tensor":
            value = _assemble("dcp_to_torch_save", key, entry, (0,) * len(entry["shape"]), tuple(entry["shape"]), read)
        elif "file" in entry:
            value = read(entry["file"], entry["key"])
        else:
            continue
        _set_element(out, entry.get("path") or [key], value)
    serialization.save(out, torch_save_path)


def _set_element(root, path, value):
    """Put ``value`` at ``path`` (str keys: dicts, int keys: lists), making the containers."""
    node = root
    for step, nxt in zip(path[:-1], path[1:]):
        empty = [] if isinstance(nxt, int) else {}
        if isinstance(node, list):
            node.extend([None] * (step + 1 - len(node)))
            if node[step] is None:
                node[step] = empty
        else:
            node.setdefault(step, empty)
        node = node[step]
    last = path[-1]
    if isinstance(node, list):
        node.extend([None] * (last + 1 - len(node)))
    node[last] = value


def torch_save_to_dcp(torch_save_path, dcp_checkpoint_dir):
    """Write the state dict in a ``lucid.save`` file as a (single-process) DCP directory."""
    from ... import serialization
    from ._save_load import save

    sd = serialization.load(torch_save_path, weights_only=True)
    save(sd, checkpoint_id=dcp_checkpoint_dir, no_dist=True)
