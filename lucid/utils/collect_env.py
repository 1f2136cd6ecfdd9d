"""``lucid.utils.collect_env`` (``torch.utils.collect_env``): a report of this machine and
installation for bug reports, ``python -m lucid.utils.collect_env``.

Every field is read from the machine: the installed versions come from the package metadata
(nothing is imported: CuPy alone would take seconds), the OS from ``/etc/os-release`` and
``platform``, the CPU from ``lscpu`` (or ``/proc/cpuinfo``), compilers and GPUs from their tools
when they are on ``PATH``. A missing tool gives ``None`` ("Could not collect").

Examples
--------
>>> from lucid.utils.collect_env import get_env_info
>>> info = get_env_info()
>>> info.lucid_version == __import__("lucid").__version__
True
"""
from __future__ import annotations

import collections
import importlib.metadata
import locale
import os
import platform
import re
import shutil
import subprocess
import sys

__all__ = ["SystemEnv", "get_env_info", "get_pretty_env_info", "main"]

SystemEnv = collections.namedtuple("SystemEnv", [
    "lucid_version", "numpy_version", "scipy_version", "mpi4py_version", "cupy_version", "torch_version",
    "python_version", "python_platform", "os", "libc_version", "gcc_version", "clang_version", "cmake_version",
    "cpu_info", "cpu_count", "nvidia_gpu_models", "nvidia_driver_version", "mpiexec_version", "pip_packages",
])

_PACKAGE_PATTERNS = ("lucid", "numpy", "scipy", "mpi4py", "mpich", "cupy", "torch", "opt-einsum", "opt_einsum")


def run(command):
    """Run ``command`` (a list) and return ``(returncode, stdout, stderr)``; ``(127, "", why)``
    when it cannot start."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return 127, "", str(e)
    return done.returncode, done.stdout.strip(), done.stderr.strip()


def run_and_read_all(run_lambda, command):
    """``command``'s output, or None when it failed."""
    rc, out, _ = run_lambda(command)
    return out if rc == 0 else None


def run_and_parse_first_match(run_lambda, command, regex):
    """The first group of ``regex`` in ``command``'s output, or None."""
    rc, out, _ = run_lambda(command)
    if rc != 0:
        return None
    match = re.search(regex, out)
    return match.group(1) if match else None


def run_and_return_first_line(run_lambda, command):
    """The first line of ``command``'s output, or None."""
    out = run_and_read_all(run_lambda, command)
    return out.splitlines()[0] if out else None


def _version(distribution):
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_installed(*distributions):
    for name in distributions:
        v = _version(name)
        if v is not None:
            return f"{v} ({name})" if len(distributions) > 1 else v
    return None


def _tool(command, regex):
    if shutil.which(command[0]) is None:
        return None
    return run_and_parse_first_match(run, command, regex)


def get_os():
    """The OS name and version (``/etc/os-release``'s PRETTY_NAME on Linux) and architecture."""
    pretty = None
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    pretty = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    system = pretty or f"{platform.system()} {platform.release()}"
    return f"{system} ({platform.machine()})"


def get_python_platform():
    return platform.platform()


def get_libc_version():
    name, version = platform.libc_ver()
    return f"{name}-{version}" if name else None


def get_gcc_version():
    return _tool(["gcc", "--version"], r"gcc.*?\) ([^\s]+)|gcc version ([^\s]+)") or \
        _tool(["gcc", "-dumpfullversion"], r"(\S+)")


def get_clang_version():
    return _tool(["clang", "--version"], r"clang version ([^\s]+)")


def get_cmake_version():
    return _tool(["cmake", "--version"], r"cmake version ([^\s]+)")


def get_cpu_info():
    """``lscpu``'s report (or ``/proc/cpuinfo``'s model name), as text."""
    if shutil.which("lscpu"):
        out = run_and_read_all(run, ["lscpu"])
        if out:
            return out
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def get_nvidia_smi():
    """The GPU list from ``nvidia-smi -L`` and the driver version, or (None, None)."""
    if shutil.which("nvidia-smi") is None:
        return None, None
    models = run_and_read_all(run, ["nvidia-smi", "-L"])
    driver = run_and_parse_first_match(run, ["nvidia-smi"], r"Driver Version: (\S+)")
    return models, driver


def get_pip_packages():
    """``name==version`` lines for the installed distributions Lucid's reports care about."""
    found = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        if any(name.lower().startswith(p) for p in _PACKAGE_PATTERNS):
            found.add(f"{name}=={dist.version}")
    return "\n".join(sorted(found, key=str.lower)) or None


def _mpiexec():
    """The ``mpiexec`` ``lucid-run`` would use (beside this Python, else on ``PATH``)."""
    from ..distributed.run import find_mpiexec

    try:
        return find_mpiexec()
    except (OSError, RuntimeError, FileNotFoundError):
        return None


def _mpiexec_version(mpiexec):
    out = run_and_read_all(run, [mpiexec, "--version"]) if mpiexec else None
    if not out:
        return None
    hydra = re.search(r"HYDRA build details:.*?Version:\s+(\S+)", out, re.S)  # MPICH's launcher
    return f"MPICH Hydra {hydra.group(1)} ({mpiexec})" if hydra else f"{out.splitlines()[0]} ({mpiexec})"


def get_env_info():
    """The facts of this machine and installation, as a :class:`SystemEnv`."""
    import lucid

    models, driver = get_nvidia_smi()
    mpiexec = _mpiexec()
    return SystemEnv(
        lucid_version=lucid.__version__, numpy_version=_version("numpy"), scipy_version=_version("scipy"),
        mpi4py_version=_version("mpi4py"),
        cupy_version=_first_installed("cupy", "cupy-cuda12x", "cupy-cuda11x", "cupy-rocm-5-0"),
        torch_version=_version("torch"),
        python_version=f"{sys.version.replace(chr(10), ' ')} ({sys.maxsize.bit_length() + 1}-bit runtime)",
        python_platform=get_python_platform(), os=get_os(), libc_version=get_libc_version(),
        gcc_version=get_gcc_version(), clang_version=get_clang_version(), cmake_version=get_cmake_version(),
        cpu_info=get_cpu_info(), cpu_count=os.cpu_count(), nvidia_gpu_models=models, nvidia_driver_version=driver,
        mpiexec_version=_mpiexec_version(mpiexec),
        pip_packages=get_pip_packages())


env_info_fmt = """\
Lucid version: {lucid_version}
NumPy version: {numpy_version}
SciPy version: {scipy_version}
mpi4py version: {mpi4py_version}
CuPy version: {cupy_version}
PyTorch version (reference): {torch_version}

OS: {os}
GCC version: {gcc_version}
Clang version: {clang_version}
CMake version: {cmake_version}
Libc version: {libc_version}

Python version: {python_version}
Python platform: {python_platform}
Locale encoding: {encoding}

GPU models: {nvidia_gpu_models}
NVIDIA driver version: {nvidia_driver_version}
MPI launcher: {mpiexec_version}

CPU count: {cpu_count}
CPU:
{cpu_info}

Versions of relevant libraries:
{pip_packages}
"""


def pretty_str(envinfo):
    """``envinfo`` as the report's text; None fields read "Could not collect"."""
    fields = {k: ("Could not collect" if v is None else v) for k, v in envinfo._asdict().items()}
    fields["encoding"] = locale.getpreferredencoding(False)
    return env_info_fmt.format(**fields)


def get_pretty_env_info():
    """The whole report as text (what ``python -m lucid.utils.collect_env`` prints)."""
    return pretty_str(get_env_info())


def main():
    print("Collecting environment information...")
    print(get_pretty_env_info())


if __name__ == "__main__":
    main()
