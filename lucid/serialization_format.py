"""The safetensors header's vocabulary shared by ``lucid.save``'s encoder and ``lucid.load``'s
decoder: dtype names, metadata keys, limits (NOTE [Checkpoint format] in ``serialization.py``)."""
from __future__ import annotations

import numpy as np

from ._core import dtypes as _dtypes

_FORMAT = "lucid"
_STRUCT_KEY = "lucid.structure"
_MAX_HEADER = 100 * 1024 * 1024  # 100 MB of JSON is certainly not a real header
_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
           "I32": np.int32, "I64": np.int64, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32,
           "U64": np.uint64, "BOOL": np.bool_}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}
# The ml_dtypes floats (NOTE [bfloat16], NOTE [float8]): safetensors' names where it has one
# (BF16, F8_E4M3, F8_E5M2), Lucid's own for the fnuz types (which safetensors lacks).
_ML_CODES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
             "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz"}
_ML_CODE_OF = {name: code for code, name in _ML_CODES.items()}


def _code_of(dt):
    """The file's name for a NumPy dtype ("BF16": safetensors' name; NOTE [bfloat16]), or None."""
    if dt in _dtypes.ML_FLOATS:
        return _ML_CODE_OF[dt.name]
    return _CODES.get(dt.newbyteorder("="))


def _little(dt):
    """``dt`` in little-endian order: ``dt`` itself where that is its order already (so an
    extension dtype such as bfloat16 keeps its identity, which the bfloat16 hook compares)."""
    little = dt.newbyteorder("<")
    return dt if little == dt else little


def _dtype_of_code(code):
    """The NumPy dtype a file's dtype name stands for (bfloat16 and float8 load ml_dtypes)."""
    if code in _ML_CODES:
        try:
            return _dtypes.enable_ml_float(_ML_CODES[code]).dtype
        except AttributeError as e:  # ml_dtypes missing: say so as a load error
            raise RuntimeError(f"lucid.load: the file holds {_ML_CODES[code]} tensors; {e}") from None
    return np.dtype(_DTYPES[code])


_TORCH_LEGACY = b"\x80\x02\x8a\x0al\xfc\x9cF"  # pickled magic number opening a torch < 1.6 file
