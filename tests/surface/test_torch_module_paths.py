"""PyTorch's module import paths under ``lucid`` (``from lucid.optim.adamw import AdamW`` ...).

For each path: the module imports, the names it shares with Lucid's main namespaces are the
same objects (re-exports, not copies), the small implementations behave (closed forms and
loops, no torch needed), and, where torch is installed, every public name of the torch module
resolves in Lucid's except the omissions listed here. ``import lucid`` must not import any of them.
"""
import collections
import gc
import importlib
import io
import os
import pickle
import subprocess
import sys
import threading
import time
import typing
import warnings
import zipfile

import numpy as np
import pytest

import lucid

# ------------------------------------------------------------------ the modules

# lucid path -> torch path (the same tail unless given)
MODULES = {
    "lucid.accelerator.memory": None, "lucid.autograd.anomaly_mode": None, "lucid.autograd.grad_mode": None,
    "lucid.autograd.profiler_util": None, "lucid.distributed.distributed_c10d": None,
    "lucid.distributed.constants": None, "lucid.distributed.utils": None, "lucid.distributed.launch": None,
    "lucid.distributed.launcher": None, "lucid.distributed.launcher.api": None,
    "lucid.distributed.remote_device": None, "lucid.functional": None, "lucid.fx.traceback": None,
    "lucid.fx.immutable_collections": None, "lucid.fx.annotate": None, "lucid.masked.maskedtensor": None,
    "lucid.masked.maskedtensor.core": None, "lucid.masked.maskedtensor.creation": None,
    "lucid.multiprocessing.pool": None, "lucid.multiprocessing.queue": None,
    "lucid.multiprocessing.reductions": None, "lucid.multiprocessing.spawn": None, "lucid.nn.common_types": None,
    "lucid.nn.intrinsic": None, "lucid.nn.intrinsic.modules": None, "lucid.nn.intrinsic.qat": None,
    "lucid.nn.intrinsic.qat.modules": None, "lucid.nn.intrinsic.quantized": None,
    "lucid.nn.intrinsic.quantized.modules": None, "lucid.nn.intrinsic.quantized.dynamic": None,
    "lucid.nn.intrinsic.quantized.dynamic.modules": None, "lucid.nn.qat": None, "lucid.nn.qat.modules": None,
    "lucid.nn.qat.dynamic": None, "lucid.nn.qat.dynamic.modules": None, "lucid.nn.quantizable": None,
    "lucid.nn.quantizable.modules": None, "lucid.nn.quantized": None, "lucid.nn.quantized.modules": None,
    "lucid.nn.quantized.dynamic": None, "lucid.nn.quantized.dynamic.modules": None,
    "lucid.nn.quantized.functional": None, "lucid.optim.adadelta": None, "lucid.optim.adagrad": None,
    "lucid.optim.adamax": None, "lucid.optim.adamw": None, "lucid.optim.asgd": None, "lucid.optim.nadam": None,
    "lucid.optim.radam": None, "lucid.optim.rmsprop": None, "lucid.optim.rprop": None,
    "lucid.optim.sparse_adam": None, "lucid.profiler.profiler": None, "lucid.return_types": None,
    "lucid.storage": None, "lucid.torch_version": None, "lucid.types": None, "lucid.utils.collect_env": None,
    "lucid.utils.deterministic": None, "lucid.utils.weak": None, "lucid.utils.backcompat": None,
    "lucid.utils.show_pickle": None, "lucid.utils.throughput_benchmark": None, "lucid.utils.file_baton": None,
}

# Modules that live beside a single-file module (lucid/accelerator.py, lucid/profiler.py): see
# NOTE [Submodules of file modules]; found once the file module has its ``__path__``.
_FILE_MODULE_CHILDREN = {"lucid.accelerator.memory": "accelerator", "lucid.profiler.profiler": "profiler"}


def _import(name):
    parent, _, child = name.rpartition(".")
    if name in _FILE_MODULE_CHILDREN and not hasattr(importlib.import_module(parent), "__path__"):
        # the parent file has no __path__ yet (the lead adds it): load the file under its name
        if name in sys.modules:
            return sys.modules[name]
        folder = os.path.join(os.path.dirname(lucid.__file__), "_module_paths", _FILE_MODULE_CHILDREN[name])
        spec = importlib.util.spec_from_file_location(name, os.path.join(folder, child + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_imports(name):
    module = _import(name)
    assert module.__name__ == name
    for public in getattr(module, "__all__", []):
        assert hasattr(module, public), f"{name}.__all__ names {public!r}, which it lacks"


# (module, name, the main object it must be)
def _same_objects():
    import lucid.ao.nn.intrinsic as ani
    import lucid.ao.nn.intrinsic.qat as aniq
    import lucid.ao.nn.qat as anqat
    import lucid.ao.nn.quantizable as anqz
    import lucid.ao.nn.quantized as anq
    import lucid.ao.nn.quantized.dynamic as anqd
    import lucid.ao.nn.quantized.functional as anqf
    import lucid.distributed as dist
    import lucid.fx.node
    import lucid.masked
    import lucid.multiprocessing as mp
    import lucid.nn
    import lucid.optim as optim
    import lucid.profiler

    rows = [(f"lucid.optim.{m}", c, getattr(optim, c)) for m, c in (
        ("adadelta", "Adadelta"), ("adagrad", "Adagrad"), ("adamax", "Adamax"), ("adamw", "AdamW"), ("asgd", "ASGD"),
        ("nadam", "NAdam"), ("radam", "RAdam"), ("rmsprop", "RMSprop"), ("rprop", "Rprop"),
        ("sparse_adam", "SparseAdam"))]
    rows += [("lucid.autograd.anomaly_mode", n, getattr(lucid.autograd, n)) for n in
             ("detect_anomaly", "set_detect_anomaly")]
    rows += [("lucid.autograd.grad_mode", n, getattr(lucid, n)) for n in
             ("no_grad", "enable_grad", "set_grad_enabled", "inference_mode")]
    rows += [("lucid.autograd.grad_mode", "set_multithreading_enabled", lucid.autograd.set_multithreading_enabled)]
    rows += [("lucid.autograd.profiler_util", n, getattr(lucid.profiler, n)) for n in
             ("EventList", "FunctionEvent", "FunctionEventAvg", "Interval")]
    rows += [("lucid.profiler.profiler", n, getattr(lucid.profiler, n)) for n in
             ("profile", "schedule", "ProfilerAction", "ExecutionTraceObserver", "supported_activities",
              "tensorboard_trace_handler")]
    rows += [("lucid.accelerator.memory", n, getattr(lucid.accelerator, n)) for n in
             ("empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved", "memory_stats",
              "reset_peak_memory_stats", "get_memory_info")]
    rows += [("lucid.distributed.distributed_c10d", n, getattr(dist, n)) for n in
             ("all_reduce", "broadcast", "init_process_group", "new_group", "get_rank", "get_world_size",
              "ReduceOp", "ProcessGroup", "Backend", "GroupMember", "group", "P2POp", "Work", "barrier",
              "destroy_process_group", "is_initialized", "default_pg_timeout", "all_gather_into_tensor")]
    rows += [("lucid.distributed.constants", "default_pg_timeout", dist.default_pg_timeout)]
    rows += [("lucid.functional", n, getattr(lucid, n)) for n in
             ("einsum", "split", "norm", "meshgrid", "broadcast_tensors", "cdist", "stft", "istft", "unique",
              "tensordot", "atleast_3d", "block_diag", "cartesian_prod", "unravel_index", "lu")]
    rows += [("lucid.fx.immutable_collections", n, getattr(lucid.fx.node, n)) for n in
             ("immutable_list", "immutable_dict")]
    rows += [("lucid.masked.maskedtensor", n, getattr(lucid.masked, n)) for n in
             ("MaskedTensor", "is_masked_tensor", "masked_tensor", "as_masked_tensor")]
    rows += [("lucid.multiprocessing.spawn", n, getattr(mp, n)) for n in
             ("ProcessContext", "ProcessRaisedException", "ProcessExitedException", "start_processes")]
    rows += [("lucid.multiprocessing.spawn", "SpawnContext", mp.ProcessContext)]
    rows += [("lucid.multiprocessing.queue", "ForkingPickler", mp.ForkingPickler)]
    rows += [("lucid.storage", n, getattr(lucid, n)) for n in ("TypedStorage", "UntypedStorage")]
    rows += [("lucid.nn.quantized", n, getattr(anq, n)) for n in ("Linear", "Conv2d", "Quantize", "DeQuantize",
                                                                  "FloatFunctional", "LSTM", "Embedding")]
    rows += [("lucid.nn.quantized", "MaxPool2d", lucid.nn.MaxPool2d)]
    rows += [("lucid.nn.quantized.modules", "Linear", anq.Linear)]
    rows += [("lucid.nn.quantized.dynamic", n, getattr(anqd, n)) for n in ("Linear", "LSTM", "GRUCell")]
    rows += [("lucid.nn.quantized.dynamic.modules", "Linear", anqd.Linear)]
    rows += [("lucid.nn.quantized.functional", n, getattr(anqf, n)) for n in ("linear", "conv2d", "max_pool2d")]
    rows += [("lucid.nn.intrinsic", n, getattr(ani, n)) for n in ("ConvReLU2d", "LinearReLU", "ConvBnReLU2d")]
    rows += [("lucid.nn.intrinsic.modules", "ConvBn2d", ani.ConvBn2d)]
    rows += [("lucid.nn.intrinsic.qat", n, getattr(aniq, n)) for n in ("ConvBn2d", "LinearReLU", "freeze_bn_stats")]
    rows += [("lucid.nn.intrinsic.quantized", n, getattr(anq, n)) for n in ("ConvReLU2d", "LinearReLU")]
    rows += [("lucid.nn.intrinsic.quantized.dynamic", "LinearReLU", anqd.LinearReLU)]
    rows += [("lucid.nn.qat", n, getattr(anqat, n)) for n in ("Linear", "Conv2d", "Embedding")]
    rows += [("lucid.nn.quantizable", n, getattr(anqz, n)) for n in ("LSTM", "MultiheadAttention")]
    return rows


def test_names_are_the_main_objects():
    wrong = [(m, n) for m, n, obj in _same_objects() if getattr(_import(m), n) is not obj]
    assert not wrong, f"not the same objects as Lucid's main ones: {wrong}"


# ------------------------------------------------------------------ against torch's public names

# Names of the torch module deliberately not in Lucid's (each with its reason in the report).
OMITTED = {
    "lucid.autograd.profiler_util": {"EventMetadata", "FormattedTimesMixin", "StringTable"},  # Kineto internals
    "lucid.distributed.distributed_c10d": {"ProcessGroupGloo", "shrink_group"},  # MPI only
    "lucid.masked.maskedtensor": {"binary", "unary", "reductions", "passthrough"},  # torch's internal op tables
    "lucid.multiprocessing.reductions": {
        "SharedCache", "StorageWeakRef", "fd_id", "rebuild_cuda_tensor", "rebuild_event", "rebuild_meta_tensor",
        "rebuild_nested_tensor", "rebuild_sparse_compressed_tensor", "rebuild_sparse_coo_tensor",
        "rebuild_storage_empty", "rebuild_storage_fd", "rebuild_storage_filename", "rebuild_typed_storage",
        "rebuild_typed_storage_child", "reduce_event", "reduce_nested_tensor", "reduce_sparse_tensor",
        "reduce_storage", "reduce_typed_storage", "reduce_typed_storage_child", "shared_cache",
        "storage_from_cache"},  # storage-level and CUDA-IPC sharing: Lucid shares tensor buffers
    "lucid.nn.quantized": {"FXFloatFunctional"}, "lucid.nn.quantized.modules": {"FXFloatFunctional"},
    "lucid.nn.quantized.dynamic": {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                                   "ConvTranspose3d"},
    "lucid.nn.quantized.dynamic.modules": {"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                                           "ConvTranspose3d"},
    "lucid.nn.intrinsic.quantized": {"BNReLU2d", "BNReLU3d"},
    "lucid.nn.intrinsic.quantized.modules": {"BNReLU2d", "BNReLU3d"},
    "lucid.nn.qat.dynamic": {"Linear"}, "lucid.nn.qat.dynamic.modules": {"Linear"},
    "lucid.utils.collect_env": {"COMMON_PATTERNS", "CONDA_PATTERNS", "NVIDIA_PATTERNS", "ONEAPI_PATTERNS",
                                "PIP_PATTERNS", "TORCH_AVAILABLE", "check_release_file", "get_cachingallocator_config",
                                "get_conda_packages", "get_cuda_module_loading_config", "get_cudnn_version",
                                "get_gpu_info", "get_intel_gpu_detected", "get_intel_gpu_driver_version",
                                "get_intel_gpu_onboard", "get_linux_pkg_version", "get_lsb_version",
                                "get_mac_version", "get_nvidia_driver_version", "get_platform",
                                "get_running_cuda_version", "get_windows_version", "is_xnnpack_available"},
    "lucid.distributed.launcher.api": set(),
}
# Public names of torch modules with no __all__ that users import (the rest of their dir() is
# imports of typing helpers and the like).
_NO_ALL = {
    "lucid.distributed.launch": {"get_args_parser", "parse_args", "launch", "main", "run"},
    "lucid.distributed.launcher": {"LaunchConfig", "elastic_launch", "launch_agent", "api"},
    "lucid.distributed.remote_device": {"_remote_device"},
    "lucid.distributed.utils": {"_p_assert", "_apply_to_tensors", "_recursive_to", "_to_kwargs"},
    "lucid.masked.maskedtensor": {"MaskedTensor", "is_masked_tensor", "binary", "core", "creation", "passthrough",
                                  "reductions", "unary"},
    "lucid.multiprocessing.pool": {"Pool", "SimpleQueue", "clean_worker"},
    "lucid.multiprocessing.queue": {"ConnectionWrapper", "ForkingPickler", "Queue", "SimpleQueue"},
    "lucid.multiprocessing.reductions": None,  # every public name of torch's
    "lucid.nn.quantizable": None, "lucid.nn.quantized.dynamic": None,
    "lucid.nn.quantized.functional": None, "lucid.nn.intrinsic.qat": None, "lucid.nn.intrinsic.quantized.dynamic": None,
    "lucid.nn.qat.dynamic": None, "lucid.utils.collect_env": None,
    "lucid.utils.deterministic": {"fill_uninitialized_memory"},
    "lucid.utils.backcompat": {"Warning", "broadcast_warning", "keepdim_warning"},
    "lucid.utils.throughput_benchmark": {"ExecutionStats", "ThroughputBenchmark", "format_time"},
    "lucid.utils.file_baton": {"FileBaton"},
}
_TYPING_NOISE = {"Any", "Callable", "Optional", "Union", "TypeVar", "TYPE_CHECKING", "annotations", "cast",
                 "namedtuple", "Sequence", "Iterable", "Mapping", "IO", "overload", "Self", "TypeAlias", "dataclass",
                 "field", "defaultdict", "deprecated", "OrderedDict", "NamedTuple", "Tensor", "T", "ParamsT",
                 "Optimizer", "DeviceDict", "run_lambda"}


def _torch_public(torch_module, lucid_name):
    import types

    if lucid_name == "lucid.nn.common_types":  # only private aliases (``_size_2_t`` ...), all of them
        return {n for n in vars(torch_module) if n.startswith(("_size", "_scalar", "_ratio", "_tensor_list",
                                                               "_maybe_indices"))}
    if lucid_name in _NO_ALL:
        chosen = _NO_ALL[lucid_name]
        if chosen is not None:
            return set(chosen)
        names = {n for n in dir(torch_module) if not n.startswith("__")}
        names = {n for n in names if not n.startswith("_") or n.startswith("_size") or n.startswith("_scalar")
                 or n.startswith("_ratio") or n in ("_tensor_list_t", "_maybe_indices_t")}
        out = set()
        for n in names:
            v = getattr(torch_module, n)
            if isinstance(v, types.ModuleType) and not v.__name__.startswith(torch_module.__name__ + "."):
                continue  # an imported module (os, sys ...)
            if n in _TYPING_NOISE or (getattr(v, "__module__", "") or "").startswith(("typing", "collections")):
                continue
            out.add(n)
        return out
    return set(getattr(torch_module, "__all__", None) or ())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_torch_public_names_resolve(name):
    torch = pytest.importorskip("torch")  # noqa: F841
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch_module = importlib.import_module("torch" + name[len("lucid"):])
        wanted = _torch_public(torch_module, name)
    module = _import(name)
    missing = sorted(n for n in wanted - OMITTED.get(name, set()) if not hasattr(module, n))
    assert not missing, f"{name} lacks {missing} (from {torch_module.__name__})"
    stale = sorted(n for n in OMITTED.get(name, set()) if hasattr(module, n))
    assert not stale, f"{name} now has {stale}: remove them from OMITTED"


def test_import_lucid_loads_none_of_them():
    code = ("import sys, lucid; names = " + repr(sorted(MODULES)) +
            "; print([n for n in names if n in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ optimizers' functional forms

# (module, class, class options, functional keywords, state lists as (name, initial value or None=zeros))
def _adam_like(beta1=0.9, beta2=0.999):
    return dict(beta1=beta1, beta2=beta2)


_FUNCTIONAL = [
    ("adamw", "AdamW", dict(lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05, amsgrad=True),
     dict(amsgrad=True, beta1=0.9, beta2=0.99, lr=0.1, weight_decay=0.05, eps=1e-8, maximize=False),
     [("exp_avgs", 0.0), ("exp_avg_sqs", 0.0), ("max_exp_avg_sqs", 0.0)], []),
    ("adamax", "Adamax", dict(lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01),
     dict(eps=1e-8, beta1=0.9, beta2=0.99, lr=0.1, weight_decay=0.01), [("exp_avgs", 0.0), ("exp_infs", 0.0)], []),
    ("nadam", "NAdam", dict(lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01, momentum_decay=4e-3),
     dict(beta1=0.9, beta2=0.99, lr=0.1, weight_decay=0.01, momentum_decay=4e-3, eps=1e-8),
     [("exp_avgs", 0.0), ("exp_avg_sqs", 0.0)], [("mu_products", 1.0)]),
    ("radam", "RAdam", dict(lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01),
     dict(beta1=0.9, beta2=0.99, lr=0.1, weight_decay=0.01, eps=1e-8), [("exp_avgs", 0.0), ("exp_avg_sqs", 0.0)], []),
    ("rmsprop", "RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-8, weight_decay=0.01, momentum=0.5, centered=True),
     dict(lr=0.01, alpha=0.9, eps=1e-8, weight_decay=0.01, momentum=0.5, centered=True),
     [("square_avgs", 0.0), ("grad_avgs", 0.0), ("momentum_buffer_list", 0.0)], []),
    ("adagrad", "Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.01, eps=1e-10),
     dict(lr=0.1, weight_decay=0.01, lr_decay=0.01, eps=1e-10, maximize=False), [("state_sums", 0.0)], []),
    ("adadelta", "Adadelta", dict(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.01),
     dict(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.01, maximize=False),
     [("square_avgs", 0.0), ("acc_deltas", 0.0)], []),
    ("asgd", "ASGD", dict(lr=0.1, lambd=1e-3, alpha=0.75, t0=1.0, weight_decay=0.01),
     dict(lambd=1e-3, lr=0.1, t0=1.0, alpha=0.75, weight_decay=0.01), [("axs", 0.0)], [("mus", 1.0), ("etas", 0.1)]),
    ("rprop", "Rprop", dict(lr=0.1, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0)),
     dict(step_size_min=1e-6, step_size_max=50.0, etaminus=0.5, etaplus=1.2),
     [("prevs", 0.0), ("step_sizes", 0.1)], []),
]


def _grads_of(ws):
    # d/dw sum(w^3 - 2 w): a gradient whose sign flips (Rprop's interesting case)
    return [3 * w.detach() ** 2 - 2 for w in ws]


@pytest.mark.parametrize("row", _FUNCTIONAL, ids=[r[0] for r in _FUNCTIONAL])
def test_functional_form_matches_its_class(row):
    module, cls_name, cls_opts, fn_opts, buffer_specs, number_specs = row
    mod = importlib.import_module(f"lucid.optim.{module}")
    cls, fn = getattr(mod, cls_name), getattr(mod, module)
    start = [np.array([0.3, -1.2, 2.0]), np.array([[0.5, -0.1], [1.5, 0.9]])]
    by_class = [lucid.tensor(a, dtype=lucid.float64, requires_grad=True) for a in start]
    opt = cls(by_class, **cls_opts)
    by_fn = [lucid.tensor(a, dtype=lucid.float64) for a in start]
    buffers = {name: [lucid.full_like(p, v) for p in by_fn] for name, v in buffer_specs}
    numbers = {name: [lucid.tensor(v, dtype=lucid.float64) for _ in by_fn] for name, v in number_specs}
    steps = [lucid.tensor(0.0) for _ in by_fn]
    for _ in range(4):
        grads = _grads_of(by_class)
        for p, g in zip(by_class, grads):
            p.grad = g
        opt.step()
        fn(by_fn, _grads_of(by_fn), *buffers.values(), *numbers.values(), steps, **fn_opts)
    for a, b in zip(by_class, by_fn):
        np.testing.assert_allclose(b.detach().cpu().numpy(), a.detach().cpu().numpy(), rtol=1e-12, atol=1e-14)
    assert [s.item() for s in steps] == [4.0, 4.0]
    # the caller's buffers hold the class's state (same values, changed in place)
    first_buffer = buffer_specs[0][0]
    state_key = {"exp_avgs": "exp_avg", "square_avgs": "square_avg", "state_sums": "sum", "axs": "ax",
                 "prevs": "prev"}[first_buffer]
    np.testing.assert_allclose(buffers[first_buffer][0].cpu().numpy(),
                               opt.state[by_class[0]][state_key].cpu().numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("row", _FUNCTIONAL, ids=[r[0] for r in _FUNCTIONAL])
def test_functional_form_matches_torch(row):
    torch = pytest.importorskip("torch")
    module, _, _, fn_opts, buffer_specs, number_specs = row
    lfn = getattr(importlib.import_module(f"lucid.optim.{module}"), module)
    tfn = getattr(importlib.import_module(f"torch.optim.{module}"), module)
    start = np.array([0.3, -1.2, 2.0])
    lp, tp = [lucid.tensor(start, dtype=lucid.float64)], [torch.tensor(start)]
    lb = [[lucid.full_like(lp[0], v)] for _, v in buffer_specs]
    tb = [[torch.full_like(tp[0], v)] for _, v in buffer_specs]
    ln = [[lucid.tensor(v, dtype=lucid.float64)] for _, v in number_specs]
    tn = [[torch.tensor(v, dtype=torch.float64)] for _, v in number_specs]
    ls, ts = [lucid.tensor(0.0)], [torch.tensor(0.0)]
    for _ in range(4):
        lfn(lp, [3 * lp[0] ** 2 - 2], *lb, *ln, ls, **fn_opts)
        tfn(tp, [3 * tp[0] ** 2 - 2], *tb, *tn, ts, **fn_opts)
    np.testing.assert_allclose(lp[0].cpu().numpy(), tp[0].numpy(), rtol=1e-6, atol=1e-9)


def test_functional_form_checks_before_changing_anything():
    from lucid.optim.adamw import adamw

    p = lucid.tensor([1.0, 2.0], dtype=lucid.float64)
    m, v = lucid.zeros_like(p), lucid.zeros_like(p)
    with pytest.raises(ValueError, match="adamw: exp_avg_sqs has 0 entries for 1 params"):
        adamw([p], [p.clone()], [m], [], [], [lucid.tensor(0.0)], amsgrad=False, beta1=0.9, beta2=0.999, lr=0.1,
              weight_decay=0.0, eps=1e-8, maximize=False)
    assert p.tolist() == [1.0, 2.0] and m.tolist() == [0.0, 0.0]


def test_functional_maximize_ascends():
    from lucid.optim.adagrad import adagrad

    p, s, step = lucid.tensor([1.0], dtype=lucid.float64), lucid.tensor([0.0], dtype=lucid.float64), lucid.tensor(0.0)
    adagrad([p], [lucid.tensor([2.0], dtype=lucid.float64)], [s], [step], lr=0.1, weight_decay=0.0, lr_decay=0.0,
            eps=0.0, maximize=True)
    assert p.item() == pytest.approx(1.1) and s.item() == 4.0


# ------------------------------------------------------------------ autograd paths


def test_enforce_grad_layout_policy_flag_and_grads():
    from lucid.autograd.grad_mode import enforce_grad_layout_policy, is_grad_layout_policy_enforced

    def grad_of_permuted():
        p = lucid.zeros(2, 3, 4).permute(2, 0, 1).detach().requires_grad_()
        (p * 2).sum().backward()
        return p

    with enforce_grad_layout_policy(False):
        assert not is_grad_layout_policy_enforced()
        relaxed = grad_of_permuted()
        with enforce_grad_layout_policy(True):
            assert is_grad_layout_policy_enforced()
        assert not is_grad_layout_policy_enforced()
    assert is_grad_layout_policy_enforced()
    strict = grad_of_permuted()
    assert relaxed.grad.tolist() == strict.grad.tolist() == (2 * lucid.ones(4, 2, 3)).tolist()
    assert strict.grad.stride() == strict.stride()  # the contract: the leaf's strides

    @enforce_grad_layout_policy(False)
    def inside():
        return is_grad_layout_policy_enforced()

    assert inside() is False and is_grad_layout_policy_enforced()
    seen = []
    t = threading.Thread(target=lambda: seen.append(is_grad_layout_policy_enforced()))
    with enforce_grad_layout_policy(False):
        t.start(); t.join()
    assert seen == [True]  # thread-local
    with pytest.raises(TypeError, match="enforce_grad_layout_policy: enable must be a bool"):
        enforce_grad_layout_policy("no")


def test_profiler_util_small_types():
    from lucid.autograd.profiler_util import Kernel, MemRecordsAcc

    k = Kernel("gemm", 0, 1.5)
    assert (k.name, k.device, k.duration) == ("gemm", 0, 1.5)

    class Rec:
        def __init__(self, t):
            self.t = t

        def start_us(self):
            return self.t

    acc = MemRecordsAcc([(Rec(t), t) for t in (9, 1, 5, 5, 12)])
    assert [p for _, p in acc.in_interval(5, 9)] == [5, 5, 9]
    assert list(acc.in_interval(13, 20)) == []


# ------------------------------------------------------------------ top-level paths


def test_return_types_are_the_ops_result_types():
    import lucid.return_types as rt

    x = lucid.tensor([[3.0, 1.0], [2.0, 5.0]], dtype=lucid.float64)
    spd = x @ x.T + lucid.eye(2, dtype=lucid.float64)
    cases = [(rt.max, lucid.max(x, 0)), (rt.min, lucid.min(x, 1)), (rt.sort, lucid.sort(x)),
             (rt.topk, lucid.topk(x, 1)), (rt.cummax, lucid.cummax(x, 0)), (rt.cummin, lucid.cummin(x, 0)),
             (rt.median, lucid.median(x, 0)), (rt.kthvalue, lucid.kthvalue(x, 1)), (rt.mode, lucid.mode(x, 0)),
             (rt.aminmax, lucid.aminmax(x)), (rt.frexp, lucid.frexp(x)), (rt.slogdet, lucid.slogdet(x)),
             (rt.linalg_eigh, lucid.linalg.eigh(spd)), (rt.linalg_qr, lucid.linalg.qr(x)),
             (rt.linalg_svd, lucid.linalg.svd(x)), (rt.linalg_lu_factor, lucid.linalg.lu_factor(x)),
             (rt.linalg_cholesky_ex, lucid.linalg.cholesky_ex(spd)), (rt.linalg_inv_ex, lucid.linalg.inv_ex(x))]
    for cls, result in cases:
        assert type(result) is cls, (cls, type(result))
    assert rt.max_out is rt.max and not hasattr(rt, "histogramdd_out")
    assert rt.max in rt.all_return_types and len(set(rt.all_return_types)) == len(rt.all_return_types)
    assert rt.pytree_register_structseq(rt.topk) is rt.topk
    values, spec = lucid.utils._pytree.tree_flatten(lucid.max(x, 0))
    assert len(values) == 2 and type(lucid.utils._pytree.tree_unflatten(values, spec)) is rt.max


def test_types_and_common_types():
    from lucid.nn import common_types as ct
    from lucid import types as lt

    assert typing.get_args(lt.Number) == (int, float, bool)
    assert set(typing.get_args(lt.Device)) == {lucid.device, str, int, type(None)}
    assert set(typing.get_args(lt.Storage)) == {lucid.UntypedStorage, lucid.TypedStorage}
    assert lt.py_sym_types == (lucid.SymInt, lucid.SymFloat, lucid.SymBool)
    assert typing.get_args(ct._size_2_t) == (int, tuple[int, int])
    assert typing.get_args(ct._scalar_or_tuple_2_t[float]) == (float, tuple[float, float])
    assert typing.get_args(ct._size_any_opt_t) == (int, type(None), tuple[typing.Optional[int], ...])


@pytest.mark.parametrize("a, op, b, expected", [
    ("2.13.0", ">=", (2, 1), True), ("2.13.0", "<", "2.13.1", True), ("2.13.0", "==", "2.13", True),
    ("2.13.0", ">", "2.13.0rc1", True), ("2.13.0rc1", ">", "2.13.0b2", True), ("2.13.0a1", ">", "2.13.0.dev5", True),
    ("2.13.0+cpu", "==", "2.13.0", True), ("1.10.0", ">", "1.9.9", True), ("0.1.0", "<", [0, 2], True),
    ("2.13.0.post1", ">", "2.13.0", True), ("2.13.0", "!=", (2, 13), False)])
def test_torch_version_orders(a, op, b, expected):
    import operator

    from lucid.torch_version import TorchVersion

    ops = {">=": operator.ge, "<": operator.lt, "==": operator.eq, ">": operator.gt, "!=": operator.ne}
    assert ops[op](TorchVersion(a), b) is expected
    assert isinstance(TorchVersion(a), str) and TorchVersion(a) == a


def test_torch_version_rejects_garbage_and_matches_packaging():
    from lucid.torch_version import InvalidVersion, TorchVersion

    with pytest.raises(InvalidVersion):
        TorchVersion("2.1") < "banana"
    assert (TorchVersion("2.1") == "banana") is False  # equality falls back to str's
    version = pytest.importorskip("packaging.version")
    for a, b in [("2.13.0", "2.13.0rc1"), ("1.0.dev1", "1.0a1"), ("3.1", "3.0.9"), ("1.0.post2", "1.0.post10")]:
        assert (TorchVersion(a) < version.Version(b)) == (version.Version(a) < version.Version(b)), (a, b)


# ------------------------------------------------------------------ fx paths


def test_fx_annotate_sets_node_type():
    from lucid.fx import Graph, Proxy
    from lucid.fx.annotate import annotate

    g = Graph()
    x = Proxy(g.placeholder("x"))
    assert annotate(x, int) is x and x.node.type is int
    with pytest.raises(RuntimeError, match="already had a type"):
        annotate(x, float)
    assert annotate(3, int) == 3  # outside tracing: unchanged


def test_fx_traceback_meta_state():
    from lucid.fx import Graph
    from lucid.fx import traceback as fxt

    assert not fxt.has_preserved_node_meta()
    fxt.set_stack_trace(["ignored\n"])  # outside preserve_node_meta: nothing kept
    assert "stack_trace" not in fxt.get_current_meta()
    with fxt.preserve_node_meta():
        assert fxt.has_preserved_node_meta()
        fxt.set_stack_trace(["line 1\n", "line 2\n"])
        assert fxt.format_stack() == ["line 1\nline 2\n"]
        with fxt.annotate({"a": 1}):
            with fxt.annotate({"b": 2}):
                assert fxt.get_current_meta()["custom"] == {"a": 1, "b": 2}
            assert fxt.get_current_meta()["custom"] == {"a": 1}
        assert "custom" not in fxt.get_current_meta()
        fxt.set_grad_fn_seq_nr(7); fxt.set_grad_fn_seq_nr(9)
        assert fxt.get_current_meta()["grad_fn_seq_nr"] == [7, 9]
        fxt.reset_grad_fn_seq_nr(); fxt.reset_grad_fn_seq_nr()
        assert "grad_fn_seq_nr" not in fxt.get_current_meta()
        g = Graph()
        n = g.placeholder("x")
        n.meta["custom"] = {"k": 1}
        with fxt.set_current_meta(n, "my_pass"):
            meta = fxt.get_current_meta()
            assert meta["custom"] == {"k": 1} and meta["from_node"][0].pass_name == "my_pass"
        m = g.placeholder("y")
        m.meta["from_node"] = [fxt.NodeSource(n, "my_pass", fxt.NodeSourceAction.REPLACE)]
        prov = fxt.get_graph_provenance_json(g)
        assert prov == {"y": [{"name": "x", "target": "x", "graph_id": id(g), "pass_name": "my_pass",
                               "action": ["replace"], "from_node": []}]}
    assert not fxt.has_preserved_node_meta() and fxt.get_current_meta() == {}

    @fxt.annotate_fn({"stage": "fwd"})
    def f():
        return dict(fxt.get_current_meta()["custom"])

    assert f() == {"stage": "fwd"}
    with pytest.raises(TypeError, match="annotate: expected a dict"):
        with fxt.annotate(["x"]):
            pass


# ------------------------------------------------------------------ multiprocessing paths


def _square(t):
    return t * t


def test_connection_wrapper_shares_tensor_memory():
    import multiprocessing

    from lucid.multiprocessing.queue import ConnectionWrapper

    a, b = multiprocessing.Pipe()
    t = lucid.tensor([1.0, 2.0], device="cpu")  # shared memory is a CPU feature
    ConnectionWrapper(a).send(t)
    got = ConnectionWrapper(b).recv()
    got.add_(10.0)
    assert t.tolist() == [11.0, 12.0]  # the receiver mapped the sender's memory
    assert ConnectionWrapper(a).fileno() == a.fileno()  # other attributes are the connection's


def test_queues_construct_without_context():
    from lucid.multiprocessing.queue import Queue, SimpleQueue

    q, sq = Queue(), SimpleQueue()
    q.put(lucid.tensor([3.0]))
    sq.put("x")
    assert q.get(timeout=10).tolist() == [3.0] and sq.get() == "x"
    q.close(); q.join_thread(); sq.close()


def test_pool_maps_tensors():
    from lucid.multiprocessing.pool import Pool

    with Pool(2) as pool:
        out = pool.map(_square, [lucid.tensor([2.0], device="cpu"), lucid.tensor([-3.0], device="cpu")])
    assert [t.tolist() for t in out] == [[4.0], [9.0]]


def test_reductions_reduce_tensor_roundtrip():
    from lucid.multiprocessing.reductions import init_reductions, rebuild_tensor, reduce_tensor

    t = lucid.tensor([1.0, 2.0, 3.0], device="cpu")
    rebuild, args = reduce_tensor(t)
    assert rebuild is rebuild_tensor and t.is_shared()
    init_reductions()  # idempotent
    buf = io.BytesIO()
    from lucid.multiprocessing import ForkingPickler

    ForkingPickler(buf).dump(t)
    back = pickle.loads(buf.getvalue())
    back[0] = 7.0
    assert t.tolist() == [7.0, 2.0, 3.0]


def _record_rank(i, path):
    with open(os.path.join(path, f"r{i}"), "w") as f:
        f.write(str(i))


def test_spawn_module_import_keeps_mp_spawn_callable(tmp_path):
    import lucid.multiprocessing as mp
    import lucid.multiprocessing.spawn as spawn_module

    assert callable(mp.spawn)
    spawn_module(_record_rank, args=(str(tmp_path),), nprocs=2, start_method="fork")
    assert sorted(os.listdir(tmp_path)) == ["r0", "r1"]


# ------------------------------------------------------------------ distributed paths


def test_backend_config():
    from lucid.distributed.distributed_c10d import BackendConfig

    assert str(BackendConfig("mpi")) == "cpu:mpi,cuda:mpi"
    assert BackendConfig("cpu:gloo, cuda:nccl").get_device_backend_map() == {"cpu": "gloo", "cuda": "nccl"}
    for bad, msg in (("banana", "unknown backend"), ("cpu:", "invalid backend string"),
                     ("cpu:gloo,cpu:mpi", "duplicate device type")):
        with pytest.raises(ValueError, match=f"BackendConfig: {msg}"):
            BackendConfig(bad)


def test_c10d_small_pieces():
    import lucid.distributed as dist
    from lucid.distributed import distributed_c10d as c10d

    with pytest.warns(FutureWarning, match="reduce_op is deprecated"):
        assert c10d.reduce_op.SUM is dist.ReduceOp.SUM
    assert c10d.GroupName("pg0") == "pg0"
    assert c10d.current_comm_name() == ""
    with c10d.record_comm("outer"):
        with c10d.record_comm("inner"):
            assert c10d.current_comm_name() == "inner"
        assert c10d.current_comm_name() == "outer"
    assert c10d.current_comm_name() == ""
    with pytest.raises(TypeError, match="record_comm: name must be a str"):
        with c10d.record_comm(3):
            pass
    if not dist.is_initialized():
        with pytest.raises(ValueError, match="_get_default_group: default process group has not been initialized"):
            c10d._get_default_group()


def test_remote_device_parsing():
    from lucid.distributed.remote_device import _remote_device

    d = _remote_device("trainer0/cpu")
    assert (d.worker_name(), d.rank(), str(d.device())) == ("trainer0", None, "cpu")
    r = _remote_device("rank:3/cuda:1")
    assert (r.worker_name(), r.rank(), str(r.device())) == (None, 3, "cuda:1")
    assert str(r) == "rank:3/cuda:1" and _remote_device(r) == r and hash(_remote_device("rank:3/cuda:1")) == hash(r)
    assert str(_remote_device("w").device()) == "cpu"
    for bad in ("", "a/b/c", "rank:x/cpu", "w/"):
        with pytest.raises(ValueError, match="_remote_device"):
            _remote_device(bad)


def test_distributed_utils_helpers():
    from dataclasses import dataclass

    from lucid.distributed.utils import _apply_to_tensors, _p_assert, _to_kwargs

    @dataclass
    class Batch:
        x: object
        n: int

    Pair = collections.namedtuple("Pair", "a b")
    data = {"l": [lucid.tensor(1.0), 2], "t": (lucid.tensor(3.0),), "b": Batch(lucid.tensor(4.0), 5),
            "p": Pair(lucid.tensor(5.0), "s")}
    out = _apply_to_tensors(lambda t: t * 10, data)
    assert out["l"][0].item() == 10.0 and out["l"][1] == 2 and out["t"][0].item() == 30.0
    assert out["b"].x.item() == 40.0 and out["b"].n == 5 and isinstance(out["p"], Pair) and out["p"].a.item() == 50.0
    inputs, kwargs = _to_kwargs((lucid.tensor(1.0),), {"k": lucid.tensor(2.0)}, "cpu")
    assert len(inputs) == len(kwargs) == 1 and inputs[0][0].device.type == "cpu" and kwargs[0]["k"].item() == 2.0
    assert _to_kwargs((lucid.tensor(1.0),), None, "cpu")[1] == ({},)  # padded with empty kwargs, as PyTorch
    _p_assert(True, "fine")
    with pytest.raises(AssertionError, match="broken"):
        _p_assert(False, "broken")


def test_launch_translates_pytorch_flags():
    from lucid.distributed.launch import _translate, parse_args

    assert _translate(["--nproc_per_node=2", "--use_env", "train.py", "--nproc_per_node=9"]) == \
        ["--nproc-per-node=2", "train.py", "--nproc_per_node=9"]  # the script's own flags stay
    opts = parse_args(["--nproc_per_node", "3", "train.py", "--lr", "0.1"])
    assert (opts.nproc, opts.target, opts.args) == (3, "train.py", ["--lr", "0.1"])


def _rank_and_env(scale):
    return int(os.environ["RANK"]) * scale, os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]


def _fail_on_rank_one():
    if os.environ["RANK"] == "1":
        raise ValueError("rank one fails")
    return "ok"


def test_elastic_launch_runs_a_function_on_every_rank():
    from lucid.distributed.launcher import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=3, start_method="fork", max_restarts=0)
    assert elastic_launch(config, _rank_and_env)(10) == {0: (0, "3", "0"), 1: (10, "3", "1"), 2: (20, "3", "2")}
    with pytest.raises(RuntimeError, match="launch_agent: local rank 1"):
        elastic_launch(LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, start_method="fork",
                                    max_restarts=1), _fail_on_rank_one)()
    with pytest.raises(NotImplementedError, match="one node only"):
        elastic_launch(LaunchConfig(min_nodes=1, max_nodes=2, nproc_per_node=1), _rank_and_env)(1)
    with pytest.raises(TypeError, match="elastic_launch: config must be a LaunchConfig"):
        elastic_launch({}, _rank_and_env)


def test_elastic_launch_runs_a_script_under_lucid_run(tmp_path):
    from lucid.distributed.run import find_mpiexec

    if find_mpiexec() is None:
        pytest.skip("no mpiexec")
    from lucid.distributed.launcher.api import LaunchConfig, launch_agent

    script = tmp_path / "job.py"
    script.write_text("import os, sys\nimport lucid.distributed as dist\ndist.init_process_group('mpi')\n"
                      "open(os.path.join(sys.argv[1], f'rank{dist.get_rank()}of{dist.get_world_size()}'), 'w')"
                      ".close()\n")
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, max_restarts=0)
    assert launch_agent(config, str(script), [str(tmp_path)]) == {}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("rank")) == ["rank0of2", "rank1of2"]


# ------------------------------------------------------------------ utils paths


def test_weak_id_key_dictionary_with_tensors():
    from lucid.utils.weak import TensorWeakRef, WeakIdKeyDictionary, WeakIdRef, WeakTensorKeyDictionary

    assert WeakTensorKeyDictionary is WeakIdKeyDictionary
    a, b = lucid.ones(2), lucid.ones(2)  # equal values, different tensors: different keys
    d = WeakTensorKeyDictionary({a: "a"})
    d[b] = "b"
    assert (d[a], d[b], len(d), a in d, lucid.ones(2) in d) == ("a", "b", 2, True, False)
    assert set(map(id, d)) == {id(a), id(b)}
    c = d.copy()
    del d[a]
    assert len(d) == 1 and len(c) == 2
    del a, c
    gc.collect()
    assert len(d) == 1 and list(d.values()) == ["b"]
    with pytest.raises(KeyError):
        d[lucid.zeros(1)]
    r1, r2 = WeakIdRef(b), WeakIdRef(b)
    assert r1 == r2 and hash(r1) == hash(r2) == id(b) and r1() is b
    ref = TensorWeakRef(b)
    assert ref() is b
    del b, r1, r2
    gc.collect()
    assert ref() is None and len(d) == 0
    with pytest.raises(TypeError, match="TensorWeakRef: expected a Tensor"):
        TensorWeakRef([1])


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_show_pickle_reads_without_running(tmp_path):
    from lucid.utils.show_pickle import DumpUnpickler, FakeClass, FakeObject, main

    marker = tmp_path / "ran"
    value = DumpUnpickler(io.BytesIO(pickle.dumps({"evil": _Evil(marker)}))).load()
    assert not marker.exists()  # nothing was executed
    obj = value["evil"]
    assert isinstance(obj, FakeObject) and obj.name == "system" and obj.args == (f"touch {marker}",)
    assert isinstance(DumpUnpickler(io.BytesIO(pickle.dumps(collections.OrderedDict))).load(), FakeClass)

    class WithPids(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", "0") if isinstance(obj, bytes) else None

    buf = io.BytesIO()
    WithPids(buf).dump({"w": b"raw", "step": 3})
    archive = tmp_path / "ckpt.pt"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ckpt/data.pkl", buf.getvalue())
        zf.writestr("ckpt/extra.pkl", pickle.dumps([1, 2]))
    out = io.StringIO()
    main(["show_pickle", f"{archive}@data.pkl"], out)
    assert out.getvalue() == "{'step': 3, 'w': pers.obj(('storage', '0'),)}\n"
    out = io.StringIO()
    main(["show_pickle", f"{archive}@*.pkl"], out)
    assert out.getvalue().count("@ckpt/") == 2 and "[1, 2]" in out.getvalue()
    with pytest.raises(FileNotFoundError, match="no member"):
        main(["show_pickle", f"{archive}@missing.pkl"], io.StringIO())


class _Counting:
    def __init__(self, sleep_s=0.0):
        self.calls, self.sleep_s, self.lock = 0, sleep_s, threading.Lock()

    def __call__(self, x, scale=1.0):
        with self.lock:
            self.calls += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return x * scale


def test_throughput_benchmark_measures():
    from lucid.utils.throughput_benchmark import ThroughputBenchmark, format_time

    module = _Counting(sleep_s=0.002)
    bench = ThroughputBenchmark(module)
    bench.add_input(lucid.ones(2))
    bench.add_input(lucid.ones(2), scale=3.0)
    assert bench.run_once(lucid.ones(1), scale=2.0).tolist() == [2.0]
    stats = bench.benchmark(num_calling_threads=3, num_warmup_iters=2, num_iters=30)
    assert module.calls == 1 + 3 * 2 + 30  # run_once + warmups + timed calls
    assert stats.num_iters == 30 and stats.latency_avg_ms >= 2.0  # each call sleeps 2 ms
    assert stats.total_time_seconds == pytest.approx(30 * stats.latency_avg_ms / 1000 / 3)
    assert stats.iters_per_second == pytest.approx(30 / stats.total_time_seconds)
    assert "Total number of iterations: 30" in str(stats)
    assert (format_time(time_us=999), format_time(time_ms=1.5), format_time(time_s=61)) == \
        ("999.000us", "1.500ms", "61.000s")
    with pytest.raises(AssertionError):
        format_time(time_us=1, time_s=1)
    with pytest.raises(RuntimeError, match="no inputs"):
        ThroughputBenchmark(module).benchmark()

    def broken(x):
        raise ZeroDivisionError("inside the module")

    failing = ThroughputBenchmark(broken)
    failing.add_input(1)
    with pytest.raises(ZeroDivisionError, match="inside the module"):
        failing.benchmark(num_calling_threads=2, num_warmup_iters=1, num_iters=4)


def test_file_baton(tmp_path):
    from lucid.utils.file_baton import FileBaton

    path = str(tmp_path / "lock")
    first, second = FileBaton(path, wait_seconds=0.01), FileBaton(path, wait_seconds=0.01)
    assert first.try_acquire() and not second.try_acquire()
    timer = threading.Timer(0.1, first.release)
    timer.start()
    t0 = time.monotonic()
    second.wait()  # returns once the holder released
    assert time.monotonic() - t0 >= 0.05 and not os.path.exists(path)
    timer.join()
    assert second.try_acquire()
    second.release()


def test_collect_env_reports_this_machine():
    import platform

    from lucid.utils.collect_env import get_env_info, get_pretty_env_info

    info = get_env_info()
    assert info.lucid_version == lucid.__version__
    assert info.numpy_version == np.__version__
    assert info.cpu_count == os.cpu_count()
    assert info.python_version.startswith(platform.python_version())
    text = get_pretty_env_info()
    assert f"NumPy version: {np.__version__}" in text and f"CPU count: {os.cpu_count()}" in text
    assert f"numpy=={np.__version__}" in text


def test_deterministic_and_backcompat_switches():
    import lucid.utils.deterministic as det
    from lucid.utils.backcompat import broadcast_warning, keepdim_warning

    assert det.fill_uninitialized_memory is True
    try:
        det.fill_uninitialized_memory = False
        assert det.fill_uninitialized_memory is False
        with pytest.raises(TypeError, match="fill_uninitialized_memory: expected a bool"):
            det.fill_uninitialized_memory = 1
    finally:
        det.fill_uninitialized_memory = True
    assert (broadcast_warning.enabled, keepdim_warning.enabled) == (False, False)
    keepdim_warning.enabled = True
    try:
        assert keepdim_warning.enabled and not broadcast_warning.enabled
    finally:
        keepdim_warning.enabled = False
    with pytest.raises(TypeError):
        broadcast_warning.enabled = "yes"


def test_accelerator_memory_empty_host_cache_is_safe():
    memory = _import("lucid.accelerator.memory")
    memory.empty_host_cache()  # no CuPy imported: nothing to free, no error
    assert memory.memory_allocated is lucid.accelerator.memory_allocated
