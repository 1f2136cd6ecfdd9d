"""Names at the paths PyTorch code imports them from."""
import subprocess
import sys

import lucid


def test_vmap_at_the_top_level_is_func_vmap():
    assert lucid.vmap is lucid.func.vmap
    out = lucid.vmap(lambda r: r.sum())(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert out.tolist() == [3.0, 7.0]


def test_distributed_sampler_from_utils_data():
    from lucid.utils.data import DistributedSampler

    shares = [list(DistributedSampler(range(7), num_replicas=3, rank=r, shuffle=False)) for r in range(3)]
    # PyTorch pads with the first indices so every rank gets ceil(7 / 3) = 3
    assert shares == [[0, 3, 6], [1, 4, 0], [2, 5, 1]]


def test_utils_submodules_after_import_lucid_only():
    code = ("import lucid; print(lucid.utils.checkpoint.checkpoint.__name__, lucid.utils.benchmark.Timer.__name__); "
            "import sys; print('lucid.utils.checkpoint' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["checkpoint", "Timer", "True"]
    lazy = subprocess.run([sys.executable, "-c", "import lucid, sys; print('lucid.utils.benchmark' in sys.modules)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert lazy == "False"  # loaded when named, not by import lucid


def test_utils_dlpack_hooks_pytree_paths():
    import lucid

    x = lucid.arange(3.0, device="cpu")
    assert lucid.utils.dlpack.from_dlpack(x).tolist() == [0.0, 1.0, 2.0]
    handle = x.requires_grad_().register_hook(lambda g: g)
    assert isinstance(handle, lucid.utils.hooks.RemovableHandle)
    handle.remove()
    leaves, spec = lucid.utils._pytree.tree_flatten({"a": (1, 2), "b": [3]})
    assert leaves == [1, 2, 3] and lucid.utils._pytree.tree_unflatten([4, 5, 6], spec) == {"a": (4, 5), "b": [6]}
    assert lucid.utils._pytree.tree_map(lambda v: v * 2, [1, (2,)]) == [2, (4,)]
