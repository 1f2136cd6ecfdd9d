"""The CUDA backend: CuPy arrays behind ``device="cuda:N"``. See NOTE [Backends].

Imported only by ``backend._load_cuda`` once CuPy is importable and sees a GPU, so ``import
lucid`` never imports CuPy. Op impls reach CuPy through NumPy's dispatch (``np.exp(cupy_array)``
runs ``cupy.exp``); what CuPy has under another name (scipy.special -> cupyx.scipy.special)
is given by the backend.
"""
from __future__ import annotations

from .backend import Backend, device
from .dtypes import ML_FLOATS
from .kernels import cupy_factory


def _cuda_numpy_error(arr):
    raise TypeError(
        f"can't convert cuda:{arr.device.id} device type tensor to numpy. Use Tensor.cpu() to "
        "copy the tensor to host memory first."
    )


def make_backend(cupy):
    """The :class:`~lucid._core.backend.Backend` for CuPy (``cupy`` already imported)."""

    def from_numpy(arr, index=None):
        if arr.dtype in ML_FLOATS:  # NOTE [bfloat16], NOTE [float8]
            raise TypeError(f"a {arr.dtype.name} tensor can't be placed on a cuda device: CuPy has no {arr.dtype.name} "
                            "type (cupy/cupy#7527); keep it on the CPU, or use float16 on the GPU")
        with cupy.cuda.Device(cupy.cuda.runtime.getDevice() if index is None else index):
            return cupy.asarray(arr)

    def special():
        import cupyx.scipy.special

        return cupyx.scipy.special

    def scipy_linalg():
        import cupyx.scipy.linalg

        return cupyx.scipy.linalg

    def synchronize():
        cupy.cuda.runtime.deviceSynchronize()

    def move(arr, index):  # CuPy's copy() lands on the current GPU, from any GPU
        with cupy.cuda.Device(index):
            return arr.copy()

    def cudnn():  # NOTE [cuDNN convolutions]: loaded at the first device conv
        from .cudnn import Cudnn, load_library

        lib, reason = load_library()
        if lib is None:
            return None, reason
        return Cudnn(lib, cupy, lambda a: a.data.ptr, lambda: cupy.cuda.get_current_stream().ptr), None

    return Backend(
        "cuda", cupy, cupy.ndarray,
        device_of=lambda a: device("cuda", a.device.id),
        to_numpy=cupy.asnumpy,
        from_numpy=from_numpy,
        numpy_view=False,
        special=special,
        scipy_linalg=scipy_linalg,
        implicit_numpy=_cuda_numpy_error,
        synchronize=synchronize,
        kernels=cupy_factory(cupy),
        device_count=cupy.cuda.runtime.getDeviceCount,
        current_index=cupy.cuda.runtime.getDevice,
        use_device=cupy.cuda.Device,  # NOTE [Several devices]
        move=move,
        index_of=lambda a: a.device.id,
        cudnn=cudnn,
    )
