"""lucid.save files whose header length spells another format's magic load back.

A safetensors file starts with its JSON header's length (8 bytes, little-endian). A header of
0x480 bytes starts the file with b"\\x80\\x04", pickle protocol 4's magic, and lucid.load
refused such files as pickles: saving a model worked and loading it failed, by chance of the
header's size (the PyTorch quickstart's model hit it).
"""
import io
import pickle
import struct

import numpy as np
import pytest

import lucid


def _state_with_header_length(target):
    """A state dict whose lucid.save header is exactly ``target`` bytes long."""
    def save(pad):
        sd = {"w" + "x" * pad: lucid.zeros(2)}
        buf = io.BytesIO()
        lucid.save(sd, buf)
        return sd, buf.getvalue(), struct.unpack("<Q", buf.getvalue()[:8])[0]

    # the key appears about three times in the header, which is padded to 8 bytes
    start = max(0, (target - save(0)[2]) // 3 - 16)
    for pad in range(start, start + 64):
        sd, data, n = save(pad)
        if n == target:
            return sd, data
    pytest.skip(f"no key length gives a header of exactly {target} bytes")


@pytest.mark.parametrize("target", [0x0480, 0x0380, 0x0580, 0x4B50])
def test_header_lengths_that_look_like_pickle_or_zip(tmp_path, target):
    sd, data = _state_with_header_length(target)
    assert data[:2] in (b"\x80\x03", b"\x80\x04", b"\x80\x05", b"PK")
    for source in (io.BytesIO(data), str(tmp_path / "m.lucid")):
        if isinstance(source, str):
            with open(source, "wb") as f:
                f.write(data)
        back = lucid.load(source)
        assert list(back) == list(sd)
        np.testing.assert_array_equal(next(iter(back.values())).numpy(), [0.0, 0.0])


def test_real_pickles_are_still_refused(tmp_path):
    path = tmp_path / "p.pkl"
    with open(path, "wb") as f:
        pickle.dump({"a": 1}, f, protocol=4)
    with pytest.raises(ValueError, match="it looks like a pickle"):
        lucid.load(str(path))
