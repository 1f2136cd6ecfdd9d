"""Convert between a distributed checkpoint directory and a single ``lucid.save`` file."""
from __future__ import annotations

import os

__all__ = ["dcp_to_torch_save", "torch_save_to_dcp"]


def dcp_to_torch_save(dcp_checkpoint_dir, torch_save_path):
    """Write the full (unsharded) state dict of a DCP directory into one ``lucid.save`` file.

    Keys stay flattened with dots where the saved dict nested (as PyTorch's converter keeps the
    flattened keys it cannot unflatten without the original structure).

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
            out[key] = _assemble("dcp_to_torch_save", key, entry, (0,) * len(entry["shape"]), tuple(entry["shape"]), read)
        elif "file" in entry:
            out[key] = read(entry["file"], entry["key"])
    serialization.save(out, torch_save_path)


def torch_save_to_dcp(torch_save_path, dcp_checkpoint_dir):
    """Write the state dict in a ``lucid.save`` file as a (single-process) DCP directory."""
    from ... import serialization
    from ._save_load import save

    sd = serialization.load(torch_save_path, weights_only=True)
    save(sd, checkpoint_id=dcp_checkpoint_dir, no_dist=True)
